"""The end-to-end demo, small: two decoder layers of the 2B4T shapes, a few tokens, against a
real bitd. It must find the bitgo path's logits equal to bitgo.reference's bit for bit and
report its figures consistently."""

import json

import torch

from bitgo import demo


def test_demo_small_model_is_exact_and_reports_its_split(tmp_path):
    out = tmp_path / "demo.json"
    threads = torch.get_num_threads()
    try:
        rc = demo.main(["--layers", "2", "--tokens", "3", "--prompt", "2", "--vocab", "256",
                        "--skip-bf16", "--json", str(out)])
    finally:
        demo.set_threads(threads)
    assert rc == 0
    r = json.loads(out.read_text())
    assert r["exact"] is True and r["steps_checked"] == 4
    assert set(r["tokens_per_s"]) == {"torch nn.Linear float32", "bitgo i2s (bitd)"}
    assert all(v > 0 for v in r["tokens_per_s"].values())
    # the three measurements nest: bitd's compute inside the client's call inside the
    # module's, so each part of the linear-layer time is positive
    lin, bitd = r["linear_ms_per_token"], r["bitd_ms_per_token"]
    assert 0 < bitd < lin
    assert 0 < r["ipc_share"] < 1 and 0 < r["host_share"] < 1
    assert r["ipc_us_per_call"] > 0 and r["host_us_per_call"] > 0
