"""bitgo.reference on its own: round trips, refusals, edge values, exactness of the integer
sums. (Agreement with Go is test_reference_go.py.)"""

import math

import pytest
import torch

from bitgo import reference as R
from bitgo.config import QuantConfig
from conftest import (FORMATS, INT1_PANEL, TL2_CHUNK_OF, TL2_PANEL_MIN_K,
                      TL2_PANEL_MIN_K7, TL2_PANEL_MIN_M, TL2_TWO_PANEL_M, assert_bits_equal,
                      int1_panels, int1_v8, tl2_as_revision, tl2_chunk_major,
                      tl2_in_revision, tl2_panel_major, tl2_panel_of, tl2_streams)

SHAPES = [(1, 1), (1, 7), (31, 47), (33, 48), (65, 129), (32, 385)]


def logical(fmt, m, k, gen):
    if fmt in ("i2s", "tl1", "tl2"):
        return torch.randint(-1, 2, (m, k), generator=gen, dtype=torch.int8)
    if fmt == "int2":
        return torch.randint(0, 4, (m, k), generator=gen, dtype=torch.int8)
    if fmt == "int1":
        return (2 * torch.randint(0, 2, (m, k), generator=gen) - 1).to(torch.int8)
    if fmt == "int8":
        return torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
    return torch.randn((m, k), generator=gen)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("m,k", SHAPES)
def test_pack_unpack_round_trip(fmt, m, k):
    gen = torch.Generator().manual_seed(m * 1000 + k)
    w = logical(fmt, m, k, gen)
    blob = R.pack(fmt, w)
    assert blob.dtype == torch.uint8 and blob.numel() == R.layout(fmt, m, k).nbytes
    back = R.unpack(fmt, m, k, blob)
    if fmt == "bf16":
        w = R.from_bf16_bits(R.bf16_bits(w))
    if fmt in ("bf16", "f32"):
        assert_bits_equal(back, w)
    else:
        assert torch.equal(back, w)


def test_layout_sizes_match_the_table():
    # kernels/doc.go: row block bytes per format
    assert R.layout("i2s", 33, 129).row_block_bytes == 8 * 256
    assert R.layout("tl1", 1, 5).row_block_bytes == 8 * 8
    l = R.layout("tl2", 1, 100)  # K3 = 96, tail 4
    assert (l.k3, l.kp1, l.row_block_bytes) == (96, 4, 320 * 2 + 8 * 4)
    assert R.layout("int2", 1, 33).row_block_bytes == 8 * 64
    assert R.layout("int1", 1, 33).row_block_bytes == 4 * 64
    assert R.layout("int8", 1, 33).row_block_bytes == 32 * 64
    assert R.layout("bf16", 33, 3).nbytes == 2 * 64 * 3
    assert R.layout("f32", 1, 3).nbytes == 128 * 3


@pytest.mark.parametrize("fmt, bad, words", [
    ("i2s", 2, "ternary weights are -1, 0 or 1"),
    ("tl2", -2, "ternary weights"),
    ("int2", 4, "code indices 0..3"),
    ("int1", 0, "+1 or -1"),
])
def test_pack_refuses_values_outside_the_format(fmt, bad, words):
    w = logical(fmt, 5, 9, torch.Generator().manual_seed(1))
    w[3, 7] = bad
    with pytest.raises(ValueError, match=r"row 3, input 7 is -?\d+: .*" + words.replace("+", r"\+")):
        R.pack(fmt, w)


def test_pack_refuses_non_finite_float_weights_and_bad_shapes():
    w = torch.randn(4, 6)
    w[2, 5] = math.inf
    with pytest.raises(ValueError, match="f32 weight at row 2, input 5 is inf"):
        R.pack("f32", w)
    with pytest.raises(ValueError, match="2-D"):
        R.pack("i2s", torch.zeros(3, dtype=torch.int8))
    with pytest.raises(ValueError, match=r"in_features \(K\) = 70000"):
        R.pack("int8", torch.zeros(1, 70000, dtype=torch.int8))


@pytest.mark.parametrize("fmt, byte_index, value, words", [
    ("i2s", 5, 0xFF, "code 3"),  # every code 3
    ("tl1", 0, 0x9F, "tl1 index > 8"),
    ("tl2", 0, 0x0E, "tl2 code > 13 in its low 4 bits"),
])
def test_unpack_refuses_invalid_codes(fmt, byte_index, value, words):
    blob = R.pack(fmt, torch.zeros(3, 100, dtype=torch.int8))
    blob[byte_index] = value
    with pytest.raises(ValueError, match=f"invalid {fmt} blob: {words}.* at row \\d+, inputs? \\d+"):
        R.unpack(fmt, 3, 100, blob)
    with pytest.raises(ValueError, match="blob has 7 bytes"):
        R.unpack(fmt, 3, 100, blob[:7])


PANEL_M = 130 * 32 - 5
"""M of the panel-major tests: 130 row blocks, four panels of 32 and one of 2 (eight of 16 and
one of 2 in kernels/5); panel-major in kernels/5 too with K >= 4080."""


@pytest.fixture(scope="module")
def tl2_big():
    """(weights, blob, row-block streams) of random tl2 weights of a shape, made once per
    shape for this module (the panel-major shapes have some 17M weights)."""
    made = {}

    def get(m, k):
        if (m, k) not in made:
            g = torch.Generator().manual_seed(m * k)
            w = torch.randint(-1, 2, (m, k), generator=g, dtype=torch.int8)
            made[m, k] = w, R.pack("tl2", w), tl2_streams(w)
        return made[m, k]

    yield get
    made.clear()


@pytest.mark.parametrize("k,nb,kp1", [(48 * 13 + 4, 13, 4), (48 * 25, 25, 0), (48 * 11 + 3, 11, 4), (20, 0, 20)])
def test_tl2_chunk_major(k, nb, kp1):
    """A tl2 blob short of the panel rule (M = 70 is fewer than TL2_PANEL_MIN_M) stores its
    chunks (ceil(nb/10) of them, blocks spread evenly) one after another, each holding every
    row block's piece side by side, the last piece ending with the tl1 tail; a one-row-block
    blob is that row block's stream. K = 48*13 + 4: chunks of 6 and 7 blocks and a 4-input
    tail; 48*25: 8, 8, 9 blocks; 48*11 + 3: 5 and 6 blocks and a 3-input tail; 20: the tail
    alone."""
    g = torch.Generator().manual_seed(k)
    m = 70
    assert m < TL2_PANEL_MIN_M and not R.layout("tl2", m, k).paneled
    w = torch.randint(-1, 2, (m, k), generator=g, dtype=torch.int8)
    blob = R.pack("tl2", w)
    rbs = 3
    nc = max(1, -(-nb // 10))
    for rb in range(rbs):
        rows = torch.zeros((32, k), dtype=torch.int8)
        part = w[32 * rb: 32 * rb + 32]
        rows[: part.shape[0]] = part
        stream = R.pack("tl2", rows)  # one row block: the stream itself
        assert stream.numel() == 320 * nb + 8 * kp1
        for c in range(nc):
            b0, b1 = c * nb // nc, (c + 1) * nb // nc
            assert b1 - b0 <= 10
            piece = 320 * (b1 - b0) + (8 * kp1 if c == nc - 1 else 0)
            off = rbs * 320 * b0 + rb * piece
            assert torch.equal(blob[off: off + piece], stream[320 * b0: 320 * b0 + piece]), (rb, c)
    assert torch.equal(R.unpack("tl2", m, k, blob), w)


@pytest.mark.parametrize("m,k,mrb,nb,kp1,panels", [
    (PANEL_M, 48 * 88 + 7, 130, 88, 8, [32, 32, 32, 32, 2]),
    (PANEL_M, 48 * 85, 130, 85, 0, [32, 32, 32, 32, 2]),
    (TL2_TWO_PANEL_M, TL2_PANEL_MIN_K, 120, 21, 0, [32, 32, 32, 24]),
    (75 * 32 - 3, 48 * 53 + 1, 75, 53, 4, [38, 37]),
    (75 * 32, 48 * 25 + 40, 75, 25, 40, [38, 37]),
    (TL2_PANEL_MIN_M, TL2_PANEL_MIN_K, 64, 21, 0, [32, 32])])
def test_tl2_panel_major(tl2_big, m, k, mrb, nb, kp1, panels):
    """A tl2 blob of at least TL2_PANEL_MIN_M rows and TL2_PANEL_MIN_K inputs stores its
    panels one after another, panel p after the row blocks of the panels before it (S bytes
    each): in a panel of g row blocks, local row block i's block b at 320*(b*g + i), then its
    tl1 tail at 320*nb*g + 8*kp1*i. From TL2_TWO_PANEL_M rows on, panels of 32 row blocks
    (the last may hold fewer), below it two, of ceil(Mrb/2) row blocks and the rest. M =
    4155: panels of 32 (four) and 2; K = 48*88 + 7: 88 blocks and a 7-input tail padded to 8;
    48*85: no tail. TL2_TWO_PANEL_M x TL2_PANEL_MIN_K: the smallest blob in panels of 32 (three
    and 24), no tail. M = 2397 (75 row blocks): panels of 38 and 37; K = 48*53 + 1: 53
    blocks and a 1-input tail padded to 4; 2400 x 1240: the same panels of 25 blocks and a
    40-input tail (chunk-major in kernels/7). TL2_PANEL_MIN_M x TL2_PANEL_MIN_K: the smallest
    panel-major blob, two panels of 32, no tail."""
    lay = R.layout("tl2", m, k)
    assert lay.paneled and lay.panel_rows == panels[0]
    w, blob, s = tl2_big(m, k)
    size = s.shape[1]
    assert s.shape == (mrb, 320 * nb + 8 * kp1) and blob.numel() == mrb * size
    assert sum(panels) == mrb
    firsts = [sum(panels[:p]) for p in range(len(panels))]  # each panel's first row block
    for rb in range(mrb):
        p = max(q for q in range(len(panels)) if firsts[q] <= rb)
        i, gp, at = rb - firsts[p], panels[p], firsts[p] * size
        for b in range(nb):
            off = at + 320 * (b * gp + i)
            assert torch.equal(blob[off: off + 320], s[rb, 320 * b: 320 * b + 320]), (rb, b)
        off = at + 320 * nb * gp + 8 * kp1 * i
        assert torch.equal(blob[off: off + 8 * kp1], s[rb, 320 * nb:]), rb
    assert torch.equal(R.unpack("tl2", m, k, blob), w)


def test_tl2_panel_major_by_hand():
    """Marked weights land where the panel-major layout says, worked out without packing
    streams: M = 4155 (Mrb = 130: four panels of 32, then one of 2), K = 4231 (nb = 88, a
    tail of 7 inputs padded to kp1 = 8), so S = 28224. Zero weights are all-zero blocks and
    tail bytes 0x44 (index 4 twice). The same blob laid out as kernels/5 did, by hand (eight
    panels of 16, then one of 2), is relaid out into it; as kernels/6 laid it out (the same
    panels of 32), or as kernels/7 did (the same), it comes back byte for byte."""
    m, k, nb, kp1, size, mrb = PANEL_M, 48 * 88 + 7, 88, 8, 28224, 130
    w = torch.zeros(m, k, dtype=torch.int8)
    wants = {}
    for g, panels in ((32, [32] * 4 + [2]), (16, [16] * 8 + [2])):
        want = torch.zeros(mrb * size, dtype=torch.uint8)
        for p, gp in enumerate(panels):
            want[g * p * size + 320 * nb * gp: g * p * size + gp * size] = 0x44

        def block(rb, b):  # the blob offset of row block rb's tl2 block b
            p, i = divmod(rb, g)
            return g * p * size + 320 * (b * panels[p] + i)

        def tail(rb):
            p, i = divmod(rb, g)
            return g * p * size + 320 * nb * panels[p] + 8 * kp1 * i

        # code -> plane t//3, bits 5*(t%3) of word r (the row in its row block)
        w[0, 0:3] = torch.tensor([1, 0, 0])  # v = 9: code 9, plane 0, bits 0-4
        want[block(0, 0)] = 9
        w[17 * 32 + 5, 96 + 12: 96 + 15] = torch.tensor([0, 1, 1])  # v = 4: plane 1, bits 5-9
        want[block(17, 2) + 64 * 1 + 2 * 5] = 4 << 5
        w[127 * 32 + 31, 48 * 87 + 42: 48 * 87 + 45] = torch.tensor([1, 1, 1])  # 13: plane 4
        want[block(127, 87) + 64 * 4 + 2 * 31 + 1] = 13 << 2  # bits 10-14
        w[128 * 32 + 1, 48 * 50 + 6: 48 * 50 + 9] = torch.tensor([0, -1, 1])  # v = -2: code 18
        want[block(128, 50) + 64 * 0 + 2 * 1 + 1] = 18 << 2  # plane 0, bits 10-14
        w[129 * 32 + 26, 48 * 87 + 45: 48 * 87 + 48] = torch.tensor([-1, 0, 0])  # t 15: 0b11001
        for j in (0, 3, 4):  # bit j of the code in bit 15 of plane j's word
            want[block(129, 87) + 64 * j + 2 * 26 + 1] = 0x80
        # tl1 tail: byte r of unit u = index of inputs (4u, 4u+1) | index of (4u+2, 4u+3) << 4
        w[20 * 32 + 3, 4224 + 2: 4224 + 4] = torch.tensor([1, -1])  # index 3 - 1 + 4 = 6
        want[tail(20) + 3] = 0x64
        w[129 * 32, 4230] = -1  # unit 1, inputs (4228, 4229) index 4, (4230, pad) 3*-1 + 4 = 1
        want[tail(129) + 32 + 0] = 0x14
        w[128 * 32 + 2, 4227] = 1  # unit 0, inputs (4226, 4227): index 0 + 1 + 4 = 5
        want[tail(128) + 2] = 0x54
        wants[g] = want
    blob = R.pack("tl2", w)
    assert_bits_equal(blob, wants[32])
    assert torch.equal(R.unpack("tl2", m, k, blob), w)
    assert not torch.equal(wants[16], wants[32])
    assert_bits_equal(R.relayout("tl2", m, k, wants[16], "kernels/5"), blob)
    assert_bits_equal(R.relayout("tl2", m, k, wants[32], "kernels/6"), blob)
    assert_bits_equal(R.relayout("tl2", m, k, wants[32], "kernels/7"), blob)


@pytest.mark.parametrize("m,k,mrb,nb,g,g6,g7", [
    (TL2_PANEL_MIN_M - 1, TL2_PANEL_MIN_K, 63, 21, 0, 0, 0),
    (TL2_PANEL_MIN_M, TL2_PANEL_MIN_K - 1, 64, 20, 0, 0, 0),
    (TL2_PANEL_MIN_M, TL2_PANEL_MIN_K, 64, 21, 32, 0, 0),
    (2049, TL2_PANEL_MIN_K, 65, 21, 33, 0, 0),
    (TL2_TWO_PANEL_M - 1, TL2_PANEL_MIN_K, 119, 21, 60, 0, 0),
    (TL2_TWO_PANEL_M, TL2_PANEL_MIN_K - 1, 120, 20, 0, 0, 0),
    (TL2_TWO_PANEL_M, TL2_PANEL_MIN_K, 120, 21, 32, 0, 0),
    (TL2_PANEL_MIN_M, TL2_PANEL_MIN_K7 - 1, 64, 52, 32, 0, 0),
    (TL2_PANEL_MIN_M, TL2_PANEL_MIN_K7, 64, 53, 32, 0, 32),
    (TL2_TWO_PANEL_M, TL2_PANEL_MIN_K7 - 1, 120, 52, 32, 0, 0),
    (TL2_TWO_PANEL_M, TL2_PANEL_MIN_K7, 120, 53, 32, 32, 32)])
def test_tl2_layout_rule_boundary(tl2_big, m, k, mrb, nb, g, g6, g7):
    """A tl2 blob is panel-major from TL2_PANEL_MIN_K (1008: 21 blocks) inputs and
    TL2_PANEL_MIN_M rows on (kernels/layout.go): in two panels of ceil(Mrb/2) row blocks and
    the rest below TL2_TWO_PANEL_M rows (2017 rows: 64 row blocks, two of 32; 2049: 65, 33
    and 32; 3808: 119, 60 and 59), in panels of 32 from it on; chunk-major with chunks of up
    to 10 blocks below either bound: one row fewer is a row block fewer, one input fewer a
    block fewer and a 47-input tail. kernels/7 laid out the same but only from
    TL2_PANEL_MIN_K7 (2544: 53 blocks) inputs on, chunk-major from 1008 to 2543; kernels/6 in
    panels of 32 only from TL2_TWO_PANEL_M rows and TL2_PANEL_MIN_K7 inputs on; relayout
    reads their blobs as they laid them out."""
    assert (TL2_PANEL_MIN_M % 32, TL2_TWO_PANEL_M % 32) == (1, 1)
    assert (TL2_PANEL_MIN_K % 48, TL2_PANEL_MIN_K7 % 48) == (0, 0)
    lay = R.layout("tl2", m, k)
    assert (lay.row_blocks, lay.k3 // 48) == (mrb, nb)
    assert lay.paneled == (g > 0) and lay.panel_rows == g
    assert tl2_panel_of(m, k, R.LAYOUT) == g and tl2_panel_of(m, k, "kernels/6") == g6
    assert tl2_panel_of(m, k, "kernels/7") == g7
    w, blob, s = tl2_big(m, k)
    chunk = tl2_chunk_major(s, k, 10)
    assert torch.equal(blob, tl2_panel_major(s, k, g) if g else chunk)
    assert torch.equal(blob, chunk) == (g == 0)
    assert torch.equal(blob, tl2_panel_major(s, k, 32)) == (g == 32)
    assert torch.equal(R.unpack("tl2", m, k, blob), w)
    for rev, go in (("kernels/6", g6), ("kernels/7", g7)):
        old = tl2_panel_major(s, k, go) if go else chunk  # as rev laid it out
        assert torch.equal(old, blob) == (g == go), rev
        assert torch.equal(R.relayout("tl2", m, k, old, rev), blob), rev


@pytest.mark.parametrize("m,k,g", [(4064, 4080, 0), (4065, 4079, 0), (4065, 4080, 16)])
def test_tl2_layout_rule_boundary_of_kernels_5(tl2_big, m, k, g):
    """relayout reads a kernels/5 tl2 blob as kernels/5 laid it out: panel-major in panels of
    16 row blocks from 85 blocks (K >= 4080) and 128 row blocks (M > 4064) on, chunk-major
    with chunks of up to 10 blocks below either (4064 x 4080 is 127 row blocks of 85 blocks,
    4065 x 4079 128 row blocks of 84 blocks and a tail)."""
    assert tl2_panel_of(m, k, "kernels/5") == g
    w, blob, s = tl2_big(m, k)
    panel, chunk = tl2_panel_major(s, k, 16), tl2_chunk_major(s, k, 10)
    assert not torch.equal(panel, chunk) and not torch.equal(panel, blob)
    old = panel if g else chunk
    assert torch.equal(R.relayout("tl2", m, k, old, "kernels/5"), blob)


@pytest.mark.parametrize("m", [1, 31, 33, 545])
@pytest.mark.parametrize("k", [1, 20, 47, 48, 149, 48 * 10, 48 * 11 + 3, 48 * 13 + 4])
def test_tl2_round_trip_ragged(m, k):
    """pack/unpack round trips on M around the 32-row block, K below one block, at whole
    blocks, one chunk of 10 blocks, two chunks, and with a tail."""
    w = torch.randint(-1, 2, (m, k), generator=torch.Generator().manual_seed(m + 7 * k),
                      dtype=torch.int8)
    blob = R.pack("tl2", w)
    assert blob.numel() == R.layout("tl2", m, k).nbytes
    assert torch.equal(R.unpack("tl2", m, k, blob), w)


def test_tl2_block_words_by_hand():
    """One tl2 block (kernels/tl2.go): plane j = bytes 64j..64j+63, little-endian uint16 word r
    = codes of triples 3j, 3j+1, 3j+2 in bits 0-4, 5-9, 10-14 and bit j of triple 15's code in
    bit 15; code = |v| + 16*(v < 0), v = 9*w0 + 3*w1 + w2. Worked out without Go."""
    w = torch.zeros(2, 48, dtype=torch.int8)
    tri = {0: (1, 1, 1), 1: (-1, -1, -1), 2: (0, 0, -1), 3: (1, -1, 0), 5: (0, 1, 1),
           14: (-1, 0, 1), 15: (-1, 1, -1)}  # v = 13, -13, -1, 6, 4, -8, -7
    for t, ws in tri.items():
        w[0, 3 * t: 3 * t + 3] = torch.tensor(ws)
    w[1, 45:48] = torch.tensor((1, 1, 1))  # row 1: only triple 15, v = 13 = 0b01101
    # row 0: codes 13, 29, 17 | 6, 0, 4 | 0, 0, 0 | 0, 0, 0 | 0, 0, 24; triple 15: 23 = 0b10111
    # plane 0: 13 | 29<<5 | 17<<10 | 1<<15; plane 1: 6 | 4<<10 | 1<<15; plane 4: 24<<10 | 1<<15
    want = {(0, 0): 0xC7AD, (1, 0): 0x9006, (2, 0): 0x8000, (3, 0): 0x0000, (4, 0): 0xE000,
            (0, 1): 0x8000, (1, 1): 0x0000, (2, 1): 0x8000, (3, 1): 0x8000, (4, 1): 0x0000}
    expect = torch.zeros(320, dtype=torch.uint8)
    for (j, r), word in want.items():
        expect[64 * j + 2 * r] = word & 0xFF
        expect[64 * j + 2 * r + 1] = word >> 8
    blob = R.pack("tl2", w)
    assert blob.tolist() == expect.tolist()
    assert torch.equal(R.unpack("tl2", 2, 48, blob), w)

    # code 16 (a negative zero) reads as 0: triple 4 of row 0 is bits 5-9 of plane 1's word
    neg0 = blob.clone()
    neg0[64 + 0] |= (16 << 5) & 0xFF
    neg0[64 + 1] |= (16 << 5) >> 8
    assert torch.equal(R.unpack("tl2", 2, 48, neg0), w)

    # invalid codes (low 4 bits 14 or 15) are named by row and inputs; the first in Go's order
    # (triple, then row) is reported: row 5's triple 15 (code 14: bits 1-3, planes 1-3) ...
    bad = blob.clone()
    for j in (1, 2, 3):
        bad[64 * j + 2 * 5 + 1] |= 0x80
    with pytest.raises(ValueError, match=r"invalid tl2 blob: tl2 code > 13 .* at row 5, "
                                         r"inputs 45-47$"):
        R.unpack("tl2", 6, 48, bad)
    # ... unless an earlier triple of a later row is bad: row 7, triple 2 (bits 10-14 = 31)
    bad[2 * 7 + 1] |= 0x7C
    with pytest.raises(ValueError, match=r"at row 7, inputs 6-8$"):
        R.unpack("tl2", 8, 48, bad)


def test_bf16_rounding_edges():
    f = torch.tensor([1.0, 1.00390625, 1.01171875, -0.0, math.inf, 3.4e38, -3.4e38],
                     dtype=torch.float32)
    # 1 + 2^-8 ties to even (down), 1 + 3*2^-8 ties up; 3.4e38 rounds to +inf
    want = [0x3F80, 0x3F80, 0x3F82, 0x8000, 0x7F80, 0x7F80, 0xFF80]
    assert R.bf16_bits(f).tolist() == want
    nan = torch.tensor([0x7FA00001, 0xFF800001], dtype=torch.int64)
    nan = torch.where(nan >= 1 << 31, nan - (1 << 32), nan).to(torch.int32).view(torch.float32)
    assert R.bf16_bits(nan).tolist() == [0x7FE0, 0xFFC0]  # quiet, sign kept, never inf


def test_activation_quantization_rounds_half_to_even():
    cfg = QuantConfig(format="i2s")
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 200.0 / 127]])
    a = R.quantize_acts(cfg, x)
    assert float(a.xs[0]) == 1.0
    assert a.q.tolist() == [[127, 0, 2, 2, 0, -2, -2, 2]]
    z = R.quantize_acts(cfg, torch.zeros(1, 4))
    assert float(z.xs[0]) == float(torch.tensor(127.0) / torch.tensor(1e-5))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("fmt", ["i2s", "int8", "f32"])
def test_non_finite_activations_are_refused(bad, fmt):
    cfg = QuantConfig(format=fmt)
    m, k = 3, 10
    blob = R.pack(fmt, logical(fmt, m, k, torch.Generator().manual_seed(0)))
    s = torch.ones(cfg.num_scales(m, k))
    x = torch.randn(2, 3, k)
    x[1, 2, 4] = bad
    with pytest.raises(ValueError, match=r"activation of token 5, input 4 is (nan|-?inf)"):
        R.linear_packed(x, blob, s if s.numel() else None, None, cfg, m, k)


def test_lossless_bitnet_recipe():
    """i2s with per-tensor scale s and per-token activations is BitNet b1.58's reference:
    (float32(W_t . xq) * s) / xs, with W_t, s from absmean ternarization."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(40, 300, generator=gen) * 0.02
    x = torch.randn(5, 300, generator=gen)
    wt, s = R.ternarize(w)
    # (127 / tensor would be computed as 127 * reciprocal(tensor): not a division)
    xs = torch.tensor(127.0) / torch.clamp(x.abs().amax(dim=1, keepdim=True), min=1e-5)
    xq = torch.clamp(torch.round(x * xs), -128, 127)
    acc = (xq.double() @ wt.double().t()).float()
    want = (acc * s) / xs
    cfg = QuantConfig(format="i2s", act="per-token", scale="tensor")
    got = R.linear_packed(x, R.pack("i2s", wt), s, None, cfg, 40, 300)
    assert_bits_equal(got, want)


def test_integer_sums_are_exact_beyond_float32():
    """int8 with K = 65536: sums reach 2**30; the float64 path must equal int64 arithmetic."""
    m, k = 2, 1 << 16
    w = torch.full((m, k), 127, dtype=torch.int8)
    w[1] = -128
    x = torch.full((1, k), 3.0)
    x[0, 0] = -3.0
    x[0, 1] = 3.0 + 1e-3
    cfg = QuantConfig(format="int8", scale="row")
    xq = R.quantize_acts(cfg, x).q
    exact = (xq.to(torch.int64) @ w.to(torch.int64).t())
    assert abs(int(exact[0, 0])) > 1 << 24
    got = R._int_matmul(xq, w.to(torch.int32), 128)
    assert torch.equal(got, exact.to(torch.float32))


@pytest.mark.parametrize("fmt", ["i2s", "int2", "bf16"])
def test_float16_inputs_round_the_float32_result(fmt):
    cfg = QuantConfig(format=fmt)
    m, k = 9, 70
    blob = R.pack(fmt, logical(fmt, m, k, torch.Generator().manual_seed(4)))
    s = torch.rand(cfg.num_scales(m, k)) + 0.5
    x = torch.randn(4, k).half()
    y = R.linear_packed(x, blob, s if s.numel() else None, None, cfg, m, k)
    y32 = R.linear_packed(x.float(), blob, s if s.numel() else None, None, cfg, m, k)
    assert y.dtype == torch.float16 and torch.equal(y, y32.half())


def test_empty_batch_and_bad_input_shapes():
    cfg = QuantConfig(format="i2s")
    blob = R.pack("i2s", torch.zeros(3, 8, dtype=torch.int8))
    y = R.linear_packed(torch.zeros(0, 8), blob, torch.ones(1), None, cfg, 3, 8)
    assert y.shape == (0, 3)
    with pytest.raises(ValueError, match="last dimension must be in_features = 8"):
        R.linear_packed(torch.zeros(2, 9), blob, torch.ones(1), None, cfg, 3, 8)
    with pytest.raises(ValueError, match="dtype torch.float64"):
        R.linear_packed(torch.zeros(2, 8, dtype=torch.float64), blob, torch.ones(1), None, cfg,
                        3, 8)


def test_float_format_sums_inputs_in_order():
    # 1e8 + 1 - 1e8 in float32 is 0 in this order; any other order gives another answer.
    cfg = QuantConfig(format="f32")
    w = torch.tensor([[1.0, 1.0, 1.0]])
    x = torch.tensor([[1e8, 1.0, -1e8]])
    y = R.linear_packed(x, R.pack("f32", w), None, None, cfg, 1, 3)
    assert float(y) == 0.0
    x = torch.tensor([[1e8, -1e8, 1.0]])
    assert float(R.linear_packed(x, R.pack("f32", w), None, None, cfg, 1, 3)) == 1.0


@pytest.mark.parametrize("cfg", [
    QuantConfig(format="int8", scale="group:32"),
    QuantConfig(format="int2", scale="row", codebook=(-3, -1, 1, 3)),
    QuantConfig(format="int1", scale="tensor"),
    QuantConfig(format="tl1", scale="row"),
])
def test_dequantize_is_level_times_scale(cfg):
    w = torch.randn(6, 70)
    q, s = R.quantize_weights(cfg, w)
    d = R.dequantize(cfg, q, s)
    lv = R._levels(cfg, q).float()
    if cfg.scale == "tensor":
        assert torch.equal(d, lv * s[0])
    elif cfg.scale == "row":
        assert torch.equal(d, lv * s[:, None])
    else:
        assert torch.equal(d[:, 40], lv[:, 40] * s.view(6, 3)[:, 1])


@pytest.mark.parametrize("kind", ["ternary", "normal", "wide", "subnormal", "few-levels",
                                  "zeros", "huge"])
@pytest.mark.parametrize("rows", [1, 7])
def test_abs_sum_is_the_sequential_float64_sum(kind, rows):
    """The absmean sum (chunked, or the exact shortcut) equals Go's left-to-right float64 loop."""
    import numpy as np
    rng = np.random.default_rng(len(kind) * 10 + rows)
    n = 5000
    if kind == "ternary":
        v = rng.integers(-1, 2, (rows, n)).astype(np.float32) * np.float32(0.0241)
    elif kind == "normal":
        v = rng.standard_normal((rows, n)).astype(np.float32)
    elif kind == "wide":
        v = (rng.standard_normal((rows, n)) * 2.0 ** rng.integers(-60, 60, (rows, n)))
        v = v.astype(np.float32)
    elif kind == "subnormal":
        v = (rng.standard_normal((rows, n)) * 1e-42).astype(np.float32)
    elif kind == "few-levels":
        v = rng.choice(np.array([0, 0.5, -0.25, 3.0], dtype=np.float32), (rows, n))
    elif kind == "zeros":
        v = np.zeros((rows, n), dtype=np.float32)
    else:
        v = rng.choice(np.array([3e38, 1.0, -2e-30], dtype=np.float32), (rows, n))
    got = R._seq_abs_sum(v)
    for r in range(rows):
        want = 0.0
        for x in v[r]:
            want += abs(float(x))
        assert got[r] == want or (np.isinf(got[r]) and np.isinf(want)), (kind, r)


@pytest.mark.parametrize("k,nc", [(2054, 3), (1024, 1), (4096, 4), (3, 1)])
def test_tl1_chunk_major(k, nc):
    """A tl1 blob stores its chunks (ceil(nu/256) of the nu = ceil(k/4) units, spread evenly)
    one after another, each holding every row block's piece side by side; a one-row-block
    blob is that row block's stream. K = 2054: chunks of 171, 171 and 172 units; 1024: one
    full chunk; 4096: four; 3: one unit."""
    g = torch.Generator().manual_seed(k)
    m = 70
    w = torch.randint(-1, 2, (m, k), generator=g, dtype=torch.int8)
    blob = R.pack("tl1", w)
    rbs, nu = 3, -(-k // 4)
    assert blob.numel() == rbs * 32 * nu
    for rb in range(rbs):
        rows = torch.zeros((32, k), dtype=torch.int8)
        part = w[32 * rb: 32 * rb + 32]
        rows[: part.shape[0]] = part
        stream = R.pack("tl1", rows)  # one row block: the stream itself
        for c in range(nc):
            u0, u1 = c * nu // nc, (c + 1) * nu // nc
            assert u1 - u0 <= 256
            piece = 32 * (u1 - u0)
            off = rbs * 32 * u0 + rb * piece
            assert torch.equal(blob[off: off + piece], stream[32 * u0: 32 * u0 + piece]), (rb, c)
    assert torch.equal(R.unpack("tl1", m, k, blob), w)


@pytest.mark.parametrize("k", [48 * 11 + 3, 48 * 21, 48 * 25, 48 * 298 + 32, 20])
def test_relayout_tl2_from_chunk_major(k):
    """relayout re-chunks a chunk-major tl2 blob of kernels/2 or kernels/3 (chunks of up to 12
    blocks) into this revision's chunks of up to 10, and gives a kernels/4 to kernels/7 blob
    of a shape that is still chunk-major back as it is; the blocks themselves are unchanged.
    K = 48*11 + 3 is one chunk of 12 and two of 10, 48*21 two and three, 48*298 + 32 (Llama's
    14336) 25 and 30; 48*25 is three either way, and 20 only a tl1 tail."""
    g = torch.Generator().manual_seed(k)
    m = 70
    w = torch.randint(-1, 2, (m, k), generator=g, dtype=torch.int8)
    new = R.pack("tl2", w)
    nb = k // 48
    assert not R.layout("tl2", m, k).paneled
    for rev in ("kernels/2", "kernels/3", "kernels/4", "kernels/5", "kernels/6", "kernels/7"):
        old = tl2_as_revision(new, m, k, rev)
        same = -(-nb // TL2_CHUNK_OF[rev]) == -(-nb // 10)  # differ when the chunk count does
        assert torch.equal(old, new) == same, rev
        assert torch.equal(R.relayout("tl2", m, k, old, rev), new), rev
    assert torch.equal(R.relayout("tl2", m, k, new, R.LAYOUT), new)


@pytest.mark.parametrize("m,k,g5,g6,g7,revs", [
    (PANEL_M, 48 * 88 + 7, 16, 32, 32, ("kernels/2", "kernels/3", "kernels/4", "kernels/5",
                                        "kernels/6", "kernels/7")),
    (PANEL_M, 48 * 85, 16, 32, 32, ("kernels/4", "kernels/5", "kernels/6", "kernels/7")),
    (4064, 4080, 0, 32, 32, ("kernels/3", "kernels/4", "kernels/5", "kernels/6", "kernels/7")),
    (4000, 2600, 0, 32, 32, ("kernels/2", "kernels/4", "kernels/5", "kernels/6", "kernels/7")),
    (2500, 2600, 0, 0, 40, ("kernels/2", "kernels/4", "kernels/5", "kernels/6", "kernels/7")),
    (2500, 1200, 0, 0, 0, ("kernels/2", "kernels/4", "kernels/5", "kernels/6", "kernels/7")),
    (TL2_PANEL_MIN_M - 1, TL2_PANEL_MIN_K, 0, 0, 0, ("kernels/3", "kernels/4", "kernels/5",
                                                     "kernels/6", "kernels/7")),
])
def test_relayout_tl2_panel_major(tl2_big, m, k, g5, g6, g7, revs):
    """relayout lays a tl2 blob of an earlier revision out as this revision does its shape:
    4155 x 4231 (88 blocks, a tail) and 4155 x 4080, chunk-major before kernels/5 and
    panel-major in panels of 16 in kernels/5, panel-major in panels of 32 (four and a short
    one) from kernels/6 on; 4064 x 4080 (127 row blocks: just short of kernels/5's rule) and
    4000 x 2600 (125 row blocks of 54 blocks and a tail), chunk-major up to kernels/5,
    panel-major in panels of 32 from kernels/6 on (a kernels/7 blob comes back byte for
    byte); 2500 x 2600 (79 row blocks of 54 blocks and a tail), chunk-major up to kernels/6,
    two panels (of 40 and 39 row blocks) from kernels/7 on; 2500 x 1200 (79 row blocks of 25
    blocks), chunk-major up to kernels/7, two panels of 40 and 39 now; and one row block
    short of this revision's rule, chunk-major in chunks of 10: from kernels/4 on the blob it
    was. A blob laid out as this revision lays it out (chunks of up to 10, or
    the same panels) comes back byte for byte."""
    w, new, s = tl2_big(m, k)
    g = tl2_panel_of(m, k, R.LAYOUT)
    assert R.layout("tl2", m, k).panel_rows == g
    assert m != 2500 or g == 40
    assert torch.equal(tl2_in_revision(s, m, k, R.LAYOUT), new)
    assert tuple(tl2_panel_of(m, k, r) for r in ("kernels/5", "kernels/6", "kernels/7")) == (
        g5, g6, g7)
    for rev in revs:
        old = tl2_in_revision(s, m, k, rev)
        same = tl2_panel_of(m, k, rev) == g and (g > 0 or TL2_CHUNK_OF[rev] == 10)
        assert torch.equal(old, new) == same, rev
        assert torch.equal(R.relayout("tl2", m, k, old, rev), new), rev
    assert torch.equal(R.relayout("tl2", m, k, new, R.LAYOUT), new)


def test_relayout_refuses_what_it_cannot_convert():
    w = torch.randint(-1, 2, (40, 300), generator=torch.Generator().manual_seed(3),
                      dtype=torch.int8)
    tl2, i2s, tl1 = R.pack("tl2", w), R.pack("i2s", w), R.pack("tl1", w)
    with pytest.raises(ValueError, match="tl2 blobs changed layout in kernels/2, after kernels/1"):
        R.relayout("tl2", 40, 300, tl2, "kernels/1")
    with pytest.raises(ValueError, match="tl1 blobs changed layout in kernels/3, after kernels/2"):
        R.relayout("tl1", 40, 300, tl1, "kernels/2")
    with pytest.raises(ValueError, match="'kernels/10' is not one this bitgo knows"):
        R.relayout("i2s", 40, 300, i2s, "kernels/10")
    # formats whose layout has not changed since are read as they are
    assert torch.equal(R.relayout("i2s", 40, 300, i2s, "kernels/1"), i2s)
    assert torch.equal(R.relayout("tl1", 40, 300, tl1, "kernels/3"), tl1)
    assert torch.equal(R.relayout("tl1", 40, 300, tl1, "kernels/5"), tl1)
    # a blob that does not decode once laid out anew (not a blob of that revision) is refused,
    # a kernels/4 to kernels/7 one too where the layout is the same (40 x 300: chunk-major)
    bad = torch.full_like(tl2, 0xFF)
    for rev in ("kernels/2", "kernels/3", "kernels/4", "kernels/5", "kernels/6", "kernels/7"):
        with pytest.raises(ValueError, match="invalid tl2 blob: tl2 code > 13"):
            R.relayout("tl2", 40, 300, bad, rev)
    for rev in ("kernels/4", "kernels/5", "kernels/6", "kernels/7"):
        old = tl2_as_revision(tl2, 40, 300, rev)
        assert torch.equal(old, tl2)
        old[320 * 3 + 2 * 2] = 0x0E  # one chunk, row block 0's first: block 3, row 2, code 14
        with pytest.raises(ValueError, match="tl2 code > 13 .* at row 2, inputs 144-146"):
            R.relayout("tl2", 40, 300, old, rev)
    with pytest.raises(ValueError, match="blob has 7 bytes"):
        R.relayout("tl2", 40, 300, tl2[:7], "kernels/4")


def _int1_weights(m, k, seed):
    g = torch.Generator().manual_seed(seed)
    return (2 * torch.randint(0, 2, (m, k), generator=g) - 1).to(torch.int8)


@pytest.mark.parametrize("m,k,panels", [
    (1, 1, [1]), (40, 300, [1, 1]), (65, 33, [2, 1]), (1024, 64, [16, 16]),
    (1100, 45, [18, 17]), (2081, 45, [17, 17, 17, 15]), (1100, 300, [18, 17]),
    (3808, 40, [30, 30, 30, 29]), (3809, 40, [30] * 4), (3880, 45, [31, 31, 31, 29]),
    (4096, 33, [32] * 4), (4130, 45, [22] * 5 + [20]), (6912, 33, [27] * 8),
    (30752, 1, [31] * 31)])
def test_int1_layout_picture(m, k, panels):
    """Every weight's bit of an int1 blob is where kernels/int1.go's picture puts it, worked
    out here for each (row, input), padding included: 2n panels (n = ceil(Mrb/64)) of
    ceil(Mrb/(2n)) row blocks, at most INT1_PANEL, the last one short where they do not
    divide Mrb (1 row block: one panel; 961 row blocks: 31 panels of 31, fewer than 2n = 32)
    (the panels listed by hand). Row block rb = row // 32 (row
    r in it) is row block i of panel p, of g row blocks, which starts at row block f (byte f*S,
    S = 4*Kp); input 32b + 16h + j is block b, plane h, bit j of word r: byte f*S + 128*(b*g +
    i) + 64*h + 2*r + j//8, bit j%8, 1 where the weight is -1 (padding rows and inputs: +1, bit
    0). The positions cover the blob's bits exactly once."""
    lay = R.layout("int1", m, k)
    mp, kp, mrb = lay.mp, lay.kp, lay.row_blocks
    assert int1_panels(m) == panels and sum(panels) == mrb
    assert lay.panel_rows == panels[0] and lay.row_block_bytes == 4 * kp
    assert panels[0] <= INT1_PANEL and all(g == panels[0] for g in panels[:-1])
    w = _int1_weights(m, k, m * 7 + k)
    blob = R.pack("int1", w)
    row = torch.arange(mp, dtype=torch.int64)[:, None]
    inp = torch.arange(kp, dtype=torch.int64)[None, :]
    rb, r = row // 32, row % 32
    panel_of = torch.cat([torch.full((g,), p, dtype=torch.int64) for p, g in enumerate(panels)])
    firsts = torch.tensor([sum(panels[:p]) for p in range(len(panels))], dtype=torch.int64)
    p = panel_of[rb]
    f, g = firsts[p], torch.tensor(panels, dtype=torch.int64)[p]
    i = rb - f
    b, h, j = inp // 32, inp % 32 // 16, inp % 16
    off = f * 4 * kp + 128 * (b * g + i) + 64 * h + 2 * r + j // 8
    pos = (8 * off + j % 8).reshape(-1)
    assert torch.equal(pos.sort().values, torch.arange(8 * blob.numel()))
    neg = torch.zeros(mp, kp, dtype=torch.int64)
    neg[:m, :k] = (w < 0).to(torch.int64)
    got = (blob.to(torch.int64)[pos // 8] >> (pos % 8)) & 1
    assert torch.equal(got, neg.reshape(-1))
    assert torch.equal(R.unpack("int1", m, k, blob), w)


@pytest.mark.parametrize("m,mrb,g,n", [
    # Go's TestInt1Layout and its real shapes' M: M rows, row blocks, P, panels
    (40, 2, 1, 2), (1, 1, 1, 1), (1024, 32, 16, 2), (1100, 35, 18, 2), (2081, 66, 17, 4),
    (2560, 80, 20, 4), (3809, 120, 30, 4), (3840, 120, 30, 4), (3880, 122, 31, 4),
    (4096, 128, 32, 4), (6912, 216, 27, 8), (11008, 344, 29, 12), (13824, 432, 31, 14),
    (14336, 448, 32, 14), (28672, 896, 32, 28), (64000, 2000, 32, 63),
    # the edges: one row block, two panels up to 64 row blocks, four from 65, six from 129;
    # 961 row blocks: 31 panels of 31, one fewer than 2n = 32
    (32, 1, 1, 1), (33, 2, 1, 2), (65, 3, 2, 2), (2048, 64, 32, 2), (2049, 65, 17, 4),
    (4097, 129, 22, 6), (30752, 961, 31, 31), (30753, 962, 31, 32)])
def test_int1_panel_rule(m, mrb, g, n):
    """reference exports the int1 panel rule (Go's kernels.Int1Panel; Int1TwoPanelRowBlocks is
    gone) as conftest states it: with mrb row blocks, 2*ceil(mrb/64) panels of P =
    ceil(mrb/(2*ceil(mrb/64))) row blocks, the last possibly fewer, ceil(mrb/P) in all."""
    assert "INT1_PANEL" in R.__all__ and R.INT1_PANEL == INT1_PANEL == 32
    assert not hasattr(R, "INT1_TWO_PANEL_ROW_BLOCKS")
    lay = R.layout("int1", m, 1)
    panels = int1_panels(m)
    assert lay.row_blocks == mrb == sum(panels), m
    assert lay.panel_rows == g == panels[0], m
    assert -(-mrb // lay.panel_rows) == n == len(panels), m


@pytest.mark.parametrize("m,k,panels,marks", [
    # M = 1100: 35 row blocks, two panels (n = 1) of 18 and 17; panel 1
    # starts at row block 18, byte 18*S = 4608
    (1100, 45, [18, 17], [
        (0, 0, 0, 0x01),  # rb 0 (panel 0, i 0), r 0; b 0, h 0, j 0
        (5, 17, 64 + 2 * 5, 0x02),  # r 5; input 17: b 0, h 1, j 1
        (40, 33, 128 * (1 * 18 + 1) + 2 * 8, 0x02),  # rb 1, r 8; input 33: b 1, h 0, j 1
        (575, 39, 128 * (1 * 18 + 17) + 2 * 31, 0x80),  # rb 17 (panel 0's last), r 31; j 7
        (576, 16, 4608 + 64, 0x01),  # rb 18 (panel 1 of g = 17, i 0), r 0; b 0, h 1, j 0
        (1050, 16, 4608 + 128 * 14 + 64 + 2 * 26, 0x01),  # rb 32 (i 14), r 26; b 0, h 1
        (1050, 30, 4608 + 128 * 14 + 64 + 2 * 26 + 1, 0x40),  # j 14: the high byte, bit 6
        (1050, 31, 4608 + 128 * 14 + 64 + 2 * 26 + 1, 0x80),  # j 15, the same byte
        (1076, 44, 4608 + 128 * (1 * 17 + 15) + 2 * 20 + 1, 0x10),  # rb 33 (i 15), r 20; j 12
        (1099, 40, 4608 + 128 * (1 * 17 + 16) + 2 * 11 + 1, 0x01),  # the last row: rb 34, r 11
    ]),
    # M = 3880: 122 row blocks, four panels (n = 2) of 31, 31, 31 and 29; panel p starts at
    # row block 31p, byte 31*p*S = 7936p
    (3880, 45, [31, 31, 31, 29], [
        (0, 1, 0, 0x02),  # rb 0, r 0; input 1: b 0, h 0, j 1
        (991, 33, 128 * (1 * 31 + 30) + 2 * 31, 0x02),  # rb 30 (panel 0's last), r 31; j 1
        (992, 0, 7936, 0x01),  # rb 31 (panel 1, i 0), r 0
        (1968, 31, 7936 + 128 * 30 + 64 + 2 * 16 + 1, 0x80),  # rb 61 (i 30), r 16; h 1, j 15
        (1984, 20, 2 * 7936 + 64, 0x10),  # rb 62 (panel 2, i 0), r 0; input 20: h 1, j 4
        (2976, 44, 3 * 7936 + 128 * (1 * 29 + 0) + 1, 0x10),  # rb 93 (panel 3 of g = 29, i 0)
        (3879, 17, 3 * 7936 + 128 * 28 + 64 + 2 * 7, 0x02),  # the last row: rb 121 (i 28), r 7
        (3879, 40, 3 * 7936 + 128 * (1 * 29 + 28) + 2 * 7 + 1, 0x01),  # b 1, h 0, j 8
    ])])
def test_int1_panel_major_by_hand(m, k, panels, marks):
    """Marked weights land where int1.go's picture says, worked out by hand: K = 45 (Kp = 64:
    two blocks, the second's inputs 45-63 padding), so S = 4*Kp = 256; a two-panel blob and
    one of four panels with a short last one (the marks' bytes in their comments).
    All +1 (and the padding) is an all-zero blob; a -1 at row, input -> (row block, row r;
    block b, plane h, bit j) sets byte f*S + 128*(b*g + i) + 64h + 2r + j//8, bit j%8 (row
    block i of a panel of g row blocks starting at row block f)."""
    mrb = -(-m // 32)
    assert sum(panels) == mrb and R.layout("int1", m, k).panel_rows == panels[0]
    w = torch.ones(m, k, dtype=torch.int8)
    want = torch.zeros(mrb * 256, dtype=torch.uint8)
    assert_bits_equal(R.pack("int1", w), want)
    for row, inp, byte, bit in marks:
        assert w[row, inp] == 1 and not want[byte] & bit
        w[row, inp] = -1
        want[byte] |= bit
    blob = R.pack("int1", w)
    assert_bits_equal(blob, want)
    assert torch.equal(R.unpack("int1", m, k, blob), w)
    full = R._unpack_padded(R.layout("int1", m, k), blob)
    assert bool((full[m:] == 1).all()) and bool((full[:, k:] == 1).all())
    assert_bits_equal(R.relayout("int1", m, k, int1_v8(w), "kernels/8"), want)


@pytest.mark.parametrize("m,k", [(1, 1), (40, 300), (70, 64), (1100, 96), (2081, 45),
                                 (3880, 45), (6912, 33)])
def test_relayout_int1(m, k):
    """relayout encodes an int1 blob of kernels/1 to kernels/8 (row block after row block,
    VNNI4-interleaved: int1_v8) in this revision's panel-major layout, as pack does the same
    weights, padding bits and all (every bit pattern is an int1 blob: all ones stay all
    ones); a blob of this revision comes back as it is; a short blob and an unknown revision
    are refused."""
    w = _int1_weights(m, k, m + 3 * k)
    new, old = R.pack("int1", w), int1_v8(w)
    assert old.numel() == new.numel() and (m * k < 32 or not torch.equal(old, new))
    for rev in ("kernels/1", "kernels/3", "kernels/8"):
        assert torch.equal(R.relayout("int1", m, k, old, rev), new), rev
    assert torch.equal(R.relayout("int1", m, k, new, R.LAYOUT), new)
    ones = torch.full_like(old, 0xFF)
    assert torch.equal(R.relayout("int1", m, k, ones, "kernels/8"), ones)
    with pytest.raises(ValueError, match=f"blob has {old.numel() - 1} bytes"):
        R.relayout("int1", m, k, old[1:], "kernels/8")
    with pytest.raises(ValueError, match="'kernels/10' is not one this bitgo knows"):
        R.relayout("int1", m, k, old, "kernels/10")


def test_layout_history():
    """The layout revisions and the formats each changed (Go's kernels.layoutHistory): int1's
    layout changed in kernels/9 only (this revision), tl2's last in kernels/8."""
    hist = dict(R._LAYOUT_HISTORY)
    assert R.LAYOUT == "kernels/9" and list(hist)[-1] == R.LAYOUT
    assert list(hist) == [f"kernels/{n}" for n in range(1, 10)]
    assert [r for r, fs in R._LAYOUT_HISTORY if "int1" in fs] == ["kernels/9"]
    assert [r for r, fs in R._LAYOUT_HISTORY if "tl2" in fs][-1] == "kernels/8"


def test_layout_is_bitds():
    """reference.LAYOUT names the revision bitd packs (`bitd info --json`: blob_layout), so
    that a Go layout change without its Python twin fails here, whatever format it touches."""
    import json
    import subprocess

    from bitgo.daemon import find_bitd
    info = json.loads(subprocess.run([find_bitd(), "info", "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    assert info["blob_layout"] == R.LAYOUT
