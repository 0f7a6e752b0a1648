"""Writes tests/data/pcg32_kat.json: PCG32 known answers computed from the algorithm's definition.

A transcription of pcg_basic.c (M.E. O'Neill, pcg-random.org), written apart from normlab's
src/core/rng.cpp and scripts/normlab_mirror.py so that a mistake shared by those two cannot make
the known answers agree with it. Checked against pcg32-demo's published output on import.
Run: python3 tests/data/pcg32_kat_gen.py (needs only Python 3).
"""
MASK64 = 2**64 - 1
MULT = 6364136223846793005
def srandom(initstate, initseq):
    st = {'state': 0, 'inc': ((initseq << 1) | 1) & MASK64}
    random(st); st['state'] = (st['state'] + initstate) & MASK64; random(st)
    return st
def random(st):
    oldstate = st['state']
    st['state'] = (oldstate * MULT + st['inc']) & MASK64
    xorshifted = ((oldstate >> 18) ^ oldstate) >> 27 & 0xffffffff
    rot = oldstate >> 59
    return ((xorshifted >> rot) | (xorshifted << ((32 - rot) % 32))) & 0xffffffff

# pcg32-demo's published first round for seed 42, stream 54: this transcription is pcg_basic.c's.
st = srandom(42, 54)
assert [random(st) for _ in range(6)] == [0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e]

import json, math, os
def boundedrand(st, bound):  # pcg32_boundedrand_r
    threshold = (-bound % 2**32) % bound
    while True:
        r = random(st)
        if r >= threshold:
            return r % bound
def uniform(st):  # rng.h: 53 random bits of a 64-bit draw made of two 32-bit draws, high first
    hi = random(st); lo = random(st)
    return (((hi << 32) | lo) >> 11) * 2.0**-53
def normals(st, k):  # Box-Muller, cos first then the sin as the spare
    out = []
    while len(out) < k:
        u1 = 0.0
        while u1 <= 0: u1 = uniform(st)
        u2 = uniform(st)
        r = math.sqrt(-2.0 * math.log(u1)); a = 6.283185307179586476925286766559 * u2
        out += [r * math.cos(a), r * math.sin(a)]
    return out[:k]
cases = []
for seed, stream in [(42, 54), (0, 0), (1, 1), (20240601, 2), (2**64 - 1, 5), (123456789, 2**63 - 1)]:
    c = {"seed": seed, "stream": stream}
    st = srandom(seed, stream); c["u32"] = [random(st) for _ in range(8)]
    st = srandom(seed, stream); c["uniform"] = [uniform(st) for _ in range(4)]
    st = srandom(seed, stream); c["below_10"] = [boundedrand(st, 10) for _ in range(8)]
    st = srandom(seed, stream); c["normal"] = normals(st, 4)
    cases.append(c)
doc = {
  "about": ("PCG32 known answers for normlab::Rng (include/core/normlab/rng.h) and scripts/normlab_mirror.py's Rng. "
            "Computed by an independent Python transcription of pcg_basic.c (pcg32_srandom_r, pcg32_random_r, "
            "pcg32_boundedrand_r), not by normlab; seed 42 stream 54 is pcg32-demo's published first round "
            "(0xa15c02b7 0x7b47f409 ...). Each list starts from a fresh Rng(seed, stream). uniform: (u64 >> 11) * 2^-53 "
            "with u64 = two u32 draws, high first; equal bit for bit. normal: Box-Muller, cos then the spare sin; "
            "libm's log/cos/sin, so compared to normal_tolerance."),
  "normal_tolerance": 1e-13,
  "cases": cases,
}

text = json.dumps(doc, indent=1)
# One line per list: the numbers of a case read across.
import re
text = re.sub(r"\[\n\s*([^\[\]{}]*?)\n\s*\]", lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pcg32_kat.json")
with open(out, "w") as f:
    f.write(text + "\n")
