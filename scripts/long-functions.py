#!/usr/bin/env python3
"""Lists the functions longer than a limit (100 lines by default) under a directory,
longest first: `python3 scripts/long-functions.py crates 100`. A function runs from its
`fn` line to the brace that closes it (strings and comments aside); files under a
`tests` directory are left out, inline test modules are not. A function long on purpose
says why in a comment above it that starts `// Long:`; the listing marks those that do
not, and its last line counts them."""
import re,sys,os
root=sys.argv[1] if len(sys.argv)>1 else 'crates'; limit=int(sys.argv[2]) if len(sys.argv)>2 else 100
fnre=re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)')
out=[]
for dp,dn,fns in os.walk(root):
    if '/target' in dp: continue
    for f in fns:
        if not f.endswith('.rs'): continue
        p=os.path.join(dp,f); lines=open(p).read().split('\n')
        i=0
        while i<len(lines):
            m=fnre.match(lines[i])
            if m and '/tests/' not in p:
                # find opening brace
                depth=0; started=False; j=i
                while j<len(lines):
                    s=re.sub(r'"([^"\\]|\\.)*"','""',lines[j]); s=re.sub(r"'([^'\\]|\\.)'","''",s); s=s.split('//')[0]
                    for ch in s:
                        if ch=='{': depth+=1; started=True
                        elif ch=='}': depth-=1
                    if not started and s.rstrip().endswith(';'): break
                    if started and depth<=0: break
                    j+=1
                n=j-i+1
                # The comments and attributes just above the fn: a reason among them?
                k=i-1; reason=False
                while k>=0 and re.match(r'^\s*(//|#\[)',lines[k]):
                    if re.match(r'^\s*// Long:',lines[k]): reason=True
                    k-=1
                if started and n>limit: out.append((n,p,i+1,m.group(6),reason))
            i+=1
out.sort(reverse=True)
for n,p,l,name,reason in out: print(n,p+':'+str(l),name,'' if reason else '(no reason given)')
print(len(out),'functions over',limit,'of which',sum(1 for o in out if not o[4]),'without a reason')
