"""bitgo.QuantConfig mirrors Go's quantcfg: defaults, validation, error wording, the schema."""

import json

import pytest

from bitgo.config import (ActKind, Format, QuantConfig, ScaleKind, format_info)
from conftest import FORMATS, REPO

TESTDATA = REPO / "quantcfg" / "testdata"


@pytest.mark.parametrize("fmt", FORMATS)
def test_defaults_follow_the_format_table(fmt):
    c = QuantConfig(format=fmt)
    fi = format_info(fmt)
    assert c.format is Format(fmt)
    assert c.act == fi.acts[0].value and c.scale == fi.scales[0].value
    assert c.codebook == ((-2, -1, 0, 1) if fmt == "int2" else None)


def test_enums_are_strings_with_layout_docs():
    assert Format.I2S == "i2s" and str(Format.TL2) == "tl2"
    assert "Kp = roundup(K, 128)" in Format.I2S.__doc__
    assert "five planes" in Format.TL2.__doc__ and "VNNI4" in Format.INT2.__doc__
    assert ActKind("per-token") is ActKind.PER_TOKEN and ScaleKind("row") is ScaleKind.ROW
    for f in Format:
        assert f.__doc__ and f.__doc__ != Format.__doc__


def test_canonical_values_and_parsed_views():
    c = QuantConfig(format=" INT2 ", act="Per-Group:64", scale="group:128", codebook=[-3, -1, 1, 3])
    assert c.format is Format.INT2 and c.act == "per-group:64" and c.scale == "group:128"
    assert c.act_kind is ActKind.PER_GROUP and c.act_group == 64
    assert c.scale_kind is ScaleKind.GROUP and c.scale_group == 128
    assert c.codebook == (-3, -1, 1, 3) and c.seg_len() == 64
    assert c.num_scales(10, 300) == 10 * 3
    assert QuantConfig(format="i2s").num_scales(10, 300) == 1
    assert QuantConfig(format="int8").num_scales(10, 300) == 10
    assert QuantConfig(format="f32").num_scales(10, 300) == 0
    assert QuantConfig(format="i2s", act=ActKind.PER_TENSOR).act == "per-tensor"


def test_spec_round_trip():
    c = QuantConfig(format="int2", act="per-group:32", scale="group:64", codebook=(1, -3, 3, -1))
    c2, m, k = QuantConfig.from_spec(c.spec(70, 257))
    assert (c2, m, k) == (c, 70, 257)


@pytest.mark.parametrize("kwargs, words", [
    (dict(format="i3s"), ["format 'i3s'", "allowed formats are i2s, tl1, tl2, int2"]),
    (dict(format="tl1", act="per-group:128"), ["act 'per-group:128' with format tl1",
                                                "allowed: per-token, per-tensor"]),
    (dict(format="i2s", scale="group:128"), ["scale 'group:128' with format i2s",
                                             "allowed: tensor, row"]),
    (dict(format="int2", scale="group:100"), ["group size 100 is not a multiple of 32"]),
    (dict(format="int2", act="per-group:abc"), ["group size 'abc' is not an integer"]),
    (dict(format="int8", act="per-token-ish"), ["act 'per-token-ish'", '"per-group:G"']),
    (dict(format="int2", act="per-group:96", scale="group:64"),
     ["one group size must be a multiple of the other"]),
    (dict(format="i2s", act="per-group:64"), ["multiple of 128"]),
    (dict(format="int8", codebook=[1, 2, 3, 4]), ["only int2 uses a code book"]),
    (dict(format="int2", codebook=[1, 1, 2, 3]), ["levels must be distinct"]),
    (dict(format="int2", codebook=[1, 2, 3]), ["want 4 levels, got 3"]),
    (dict(format="int2", codebook=[1, 2, 3, 200]), ["codebook[3] = 200"]),
    (dict(format="f32", act="per-token"), ["act 'per-token' with format f32", "allowed: none"]),
    (dict(format="i2s", modules_to_not_convert=["lm_head", " "]), ["modules_to_not_convert[1]"]),
    (dict(format="i2s", modules_to_not_convert="lm_head"), ["want a list"]),
])
def test_errors_name_the_field_and_allowed_values(kwargs, words):
    with pytest.raises(ValueError) as e:
        QuantConfig(**kwargs)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_all_problems_are_reported_together():
    with pytest.raises(ValueError) as e:
        QuantConfig(format="tl2", act="per-group:64", scale="group:64", codebook=[1, 2, 3, 4])
    msg = str(e.value)
    assert "act 'per-group:64'" in msg and "scale 'group:64'" in msg and "code book" in msg


def test_check_shape_limits():
    QuantConfig(format="i2s").check_shape(1, 1 << 20)
    with pytest.raises(ValueError, match=r"in_features \(K\) = 65537: format int8 takes K <= 65536"):
        QuantConfig(format="int8").check_shape(4, 65537)
    with pytest.raises(ValueError, match=r"layer q: out_features \(M\) = 0"):
        QuantConfig().check_shape(0, 4, name="q")


def test_skips_is_a_substring_rule():
    c = QuantConfig(modules_to_not_convert=["lm_head", "layers.3."])
    assert c.skips("model.lm_head") and c.skips("model.layers.3.mlp")
    assert not c.skips("model.layers.30.mlp")


def _golden_cases():
    for p in sorted(TESTDATA.glob("bitgo_*.json")):
        yield pytest.param(p, id=p.stem)


@pytest.mark.parametrize("path", list(_golden_cases()))
def test_agrees_with_go_on_quantcfg_golden_files(path):
    """Go's quantcfg golden files: what Go accepts, Python accepts with the same effective
    config; what Go refuses, Python refuses naming the same setting."""
    qc = json.loads(path.read_text())["quantization_config"]
    golden = path.with_suffix(".golden").read_text()
    if golden.startswith("error:"):
        with pytest.raises(ValueError) as e:
            QuantConfig.from_dict(qc)
        # Go quotes with "double quotes", Python's repr with 'single': compare the field named
        # and the explanation (the text after the last ": ").
        msg = str(e.value).replace("'", '"')
        go = golden.split("quantization_config (bitgo): ", 1)[1].strip()
        for prefix in ("invalid quantization setting: ", "unsupported quantization setting: "):
            go = go.removeprefix(prefix)
        assert go.split()[0] in msg and go.rsplit(": ", 1)[-1] in msg, (go, msg)
    else:
        want = json.loads(golden)["config"]
        got = QuantConfig.from_dict(qc).to_dict()
        got.pop("quant_method")
        assert got == want


def test_from_dict_rejects_unknown_keys_and_missing_format():
    with pytest.raises(ValueError, match="unknown key"):
        QuantConfig.from_dict({"quant_method": "bitgo", "format": "i2s", "bits": 2})
    with pytest.raises(ValueError, match="format is missing"):
        QuantConfig.from_dict({"quant_method": "bitgo"})


def test_grouped_modes_without_a_size_say_so():
    from bitgo.config import ActKind, ScaleKind, parse_act, parse_scale
    for bad in ("per-group", " Per-Group ", ActKind.PER_GROUP):
        with pytest.raises(ValueError, match="needs a group size: 'per-group:G'"):
            parse_act(bad)
    for bad in ("group", ScaleKind.GROUP):
        with pytest.raises(ValueError, match="needs a group size: 'group:G'"):
            parse_scale(bad)
    assert parse_act(ActKind.NONE) == (ActKind.NONE, 0)
    assert parse_scale("GROUP:64") == (ScaleKind.GROUP, 64)
