#!/usr/bin/env bash
# Packs what bench/kit/run.sh needs into one folder that runs on another Linux machine of
# the same architecture with nothing installed: a stripped release linerate, the peers'
# binaries found here (iperf3, iperf, qperf, nuttcp) with every library `ldd` names, and
# quinn's own `bulk` benchmark when given one.
#
#   bash bench/kit/pack.sh                       # into ./bench-kit (ignored by git)
#   bash bench/kit/pack.sh /tmp/kit --bulk PATH  # with quinn's bulk benchmark binary
#   bash bench-kit/run.sh                        # there: ~3 minutes, figures beside lscpu
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KIT=${1:-$ROOT/bench-kit}
[[ ${1:-} == --* ]] && KIT=$ROOT/bench-kit
BULK=
while [[ $# -gt 0 ]]; do
    case $1 in
        --bulk) BULK=$2; shift 2 ;;
        *) shift ;;
    esac
done
cargo build --release --quiet -p linerate --manifest-path "$ROOT/Cargo.toml"
rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/lib"
cp "$ROOT/target/release/linerate" "$KIT/bin/linerate"
# iproute2's `ip` too: the lab and copy tests build network namespaces with it.
for peer in iperf3 iperf qperf nuttcp ip; do
    if path=$(command -v "$peer"); then
        cp "$path" "$KIT/bin/$peer"
    else
        echo "pack: $peer is not installed here; the kit runs without it" >&2
    fi
done
if [[ -n $BULK ]]; then
    cp "$BULK" "$KIT/bin/bulk"
fi
strip "$KIT"/bin/* 2>/dev/null || true
# Every shared library the binaries use, except the C library and the loader themselves,
# which must be the target machine's own (they are tied to its kernel interface).
for binary in "$KIT"/bin/*; do
    ldd "$binary" 2>/dev/null | awk '/=> \// {print $3}' | while read -r library; do
        case $(basename "$library") in
            libc.so*|ld-linux*|libm.so*|libpthread.so*|libdl.so*|librt.so*) ;;
            *) cp -n "$library" "$KIT/lib/" ;;
        esac
    done
done
cp "$ROOT/bench/kit/run.sh" "$KIT/run.sh"
du -sh "$KIT"
ls "$KIT/bin" "$KIT/lib"
