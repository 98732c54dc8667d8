#!/usr/bin/env python3
"""An E-model (ITU-T G.107, 06/2015) written apart from linerate's, as the reference its
call scores are checked against: every parameter but the mouth-to-ear delay, the loss and
the codec at Table 3's defaults; T = Ta and Tr = 2 Ta.

usage: emodel.py TA_MS PPL_PCT BURST_R IE BPL   (prints "R MOS")
"""
import math
import sys


def rating(ta, ppl, burst_r, ie, bpl):
    slr, rlr, stmr, lstr, ds = 8.0, 2.0, 15.0, 18.0, 3.0
    telr, wepl, qdu, nc, nfor, ps, pr = 65.0, 110.0, 1.0, -70.0, -64.0, 35.0, 35.0
    olr = slr + rlr
    # Noise: the circuit's, the send and receive rooms' and the receive side's floor.
    nos = ps - slr - ds - 100 + 0.004 * (ps - olr - ds - 14) ** 2
    pre = pr + 10 * math.log10(1 + 10 ** ((10 - lstr) / 10))
    nor = rlr - 121 + pre + 0.008 * (pre - 35) ** 2
    nfo = nfor + rlr
    no = 10 * math.log10(sum(10 ** (n / 10) for n in (nc, nos, nor, nfo)))
    ro = 15 - 1.5 * (slr + no)
    # Simultaneous impairments: loudness, sidetone (with its echo term), quantizing.
    t, tr = ta, 2 * ta
    xolr = olr + 0.2 * (64 + no - rlr)
    iolr = 20 * ((1 + (xolr / 8) ** 8) ** (1 / 8) - xolr / 8)
    stmro = -10 * math.log10(10 ** (-stmr / 10) + math.exp(-t / 4) * 10 ** (-telr / 10))
    ist = (12 * (1 + ((stmro - 13) / 6) ** 8) ** (1 / 8)
           - 28 * (1 + ((stmro + 1) / 19.4) ** 35) ** (1 / 35)
           - 13 * (1 + ((stmro - 3) / 33) ** 13) ** (1 / 13) + 29)
    q = 37 - 15 * math.log10(qdu)
    g = 1.07 + 0.258 * q + 0.0602 * q * q
    y = (ro - 100) / 15 + 46 / 8.4 - g / 9
    z = 46 / 30 - g / 40
    iq = 15 * math.log10(1 + 10 ** y + 10 ** z)
    is_ = iolr + ist + iq
    # Delay: talker echo, listener echo, absolute delay.
    roe = -1.5 * (no - rlr)
    terv = telr - 40 * math.log10((1 + t / 10) / (1 + t / 150)) + 6 * math.exp(-0.3 * t * t)
    re = 80 + 2.5 * (terv - 14)
    idte = ((roe - re) / 2 + math.sqrt((roe - re) ** 2 / 4 + 100) - 1) * (1 - math.exp(-t))
    rle = 10.5 * (wepl + 7) * (tr + 1) ** -0.25
    idle = (ro - rle) / 2 + math.sqrt((ro - rle) ** 2 / 4 + 169)
    if ta > 100:
        x = math.log2(ta / 100)
        idd = 25 * ((1 + x ** 6) ** (1 / 6) - 3 * (1 + (x / 3) ** 6) ** (1 / 6) + 2)
    else:
        idd = 0.0
    ie_eff = ie + (95 - ie) * ppl / (ppl / burst_r + bpl) if ppl > 0 else ie
    return ro - is_ - (idte + idle + idd) - ie_eff


def mos(r):
    if r < 0:
        return 1.0
    if r > 100:
        return 4.5
    return 1 + 0.035 * r + r * (r - 60) * (100 - r) * 7e-6


if __name__ == "__main__":
    ta, ppl, burst_r, ie, bpl = (float(v) for v in sys.argv[1:6])
    r = rating(ta, ppl, burst_r, ie, bpl)
    print(f"{r:.6f} {mos(r):.6f}")
