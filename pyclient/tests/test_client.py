"""bitgo.Client against a real bitd process (BITD_BIN, or the repository's bin/bitd): every
format bit for bit against bitgo.reference, the embedded default, faults (a daemon killed
mid-call, stopped, shutting down), bad inputs, threads, forks, chunked uploads."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
from torch import nn

import bitgo
from bitgo import reference as R
from bitgo.client import Client
from bitgo.config import QuantConfig
from bitgo.errors import DaemonError, RequestError
from conftest import DTYPES, REPO, assert_bits_equal

CONFIGS = [QuantConfig(format=f) for f in ("i2s", "tl1", "tl2", "int2", "int1", "int8",
                                           "bf16", "f32")] + [
    QuantConfig(format="i2s", act="per-group:128", scale="row"),
    QuantConfig(format="tl2", scale="row"),
    QuantConfig(format="int2", act="per-group:32", scale="group:64", codebook=(-3, -1, 1, 3)),
    QuantConfig(format="int8", act="per-tensor", scale="tensor"),
    QuantConfig(format="int1", act="per-token", scale="group:32"),
]
SHAPES = [(1,), (7,), (2, 3)]


def _id(c):
    return f"{c.format.value}-{c.act}-{c.scale}"


@pytest.fixture(scope="module")
def client():
    c = Client(embedded=True, name="test_client")
    yield c
    c.close()


def _layer(cfg, k=200, m=70, bias=True, seed=0):
    torch.manual_seed(seed)
    return bitgo.BitLinear.from_linear(nn.Linear(k, m, bias=bias), cfg)


def _register(c, b, packed=True):
    cfg = b.config
    ns = cfg.num_scales(b.out_features, b.in_features)
    w = b.packed if packed else b.logical_weights()
    return c.register(cfg.format.value, b.out_features, b.in_features, w,
                      b.scales if ns else None, b.bias, packed=packed, act=cfg.act,
                      scale=cfg.scale, codebook=cfg.codebook)


# -- exactness ------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "logical"])
def test_every_format_is_bit_exact(client, cfg, packed):
    b = _layer(cfg, bias=cfg.format.value != "int1")
    info = _register(client, b, packed)
    assert info["format"] == cfg.format.value and info["act"] == cfg.act
    assert info["scale"] == cfg.scale and (info["out"], info["in"]) == (70, 200)
    for lead in SHAPES:
        for dt in DTYPES:
            x = (torch.randn(*lead, 200) * 3).to(dt)
            y = client.forward(info["id"], x)
            assert y.dtype == dt and y.shape == (*lead, 70)
            assert_bits_equal(y, R.linear(b, x), f"{_id(cfg)} {lead} {dt}")
    client.free(info["id"])


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bitlinear_goes_through_bitd(cfg, dtype):
    b = _layer(cfg, k=160, m=48)
    assert b.handle != 0 and b.remote is not None  # the default backend is bitd
    for lead in SHAPES:
        x = torch.randn(*lead, 160).to(dtype)
        assert_bits_equal(b(x), R.linear(b, x), f"{_id(cfg)} {lead}")


def test_edge_activations_are_exact(client):
    b = _layer(QuantConfig(format="i2s"), k=256, m=64)
    info = _register(client, b)
    x = torch.zeros(6, 256)
    x[1] = 1e-7                      # under the 1e-5 floor of the activation scale
    x[2, ::2] = 0.5                  # rounding ties
    x[2, 1::2] = -1.5
    x[3] = torch.linspace(-3e4, 3e4, 256)
    x[4, 0] = 1.0                    # one non-zero
    x[5] = -0.0
    assert_bits_equal(client.forward(info["id"], x), R.linear(b, x))


def test_op_with_another_bias_uses_a_bias_free_twin():
    b = _layer(QuantConfig(format="i2s"), k=128, m=40)
    x = torch.randn(3, 128)
    for bias in (None, torch.randn(40)):
        for dt in DTYPES:
            xd = x.to(dt)
            got = bitgo.linear(xd, b.packed, b.scales, bias, b._spec, b.handle)
            want = R.linear_packed(xd, b.packed, b.scales, bias, b.config, 40, 128)
            assert_bits_equal(got, want, f"bias {bias is not None} {dt}")
    assert len(b.remote._ids) == 2


# -- registration -----------------------------------------------------------------------------


def test_chunked_upload_and_split_forward():
    c = Client(embedded=True, region_bytes=1 << 20)  # a 1 MiB region: ~1 MB data area
    try:
        assert c.data_size < 1 << 20
        b = _layer(QuantConfig(format="f32"), k=512, m=1024, bias=True)
        info = _register(c, b)  # 2 MiB of weights: several chunks
        assert info["bytes"] >= 2 << 20
        x = torch.randn(300, 512)  # 300 x (512 + 1024) x 4 bytes: more than the data area
        assert_bits_equal(c.forward(info["id"], x), R.linear(b, x))
        i8 = _layer(QuantConfig(format="int8", act="per-tensor", scale="tensor"), k=512, m=1024)
        info = _register(c, i8)
        with pytest.raises(ValueError, match="per-tensor activation scales cannot be split"):
            c.forward(info["id"], torch.randn(300, 512))
    finally:
        c.close()


def test_daemon_refusals_are_request_errors(client):
    with pytest.raises(RequestError, match="(?i)ternary") as e:
        client.register("i2s", 4, 8, torch.full((4, 8), 2, dtype=torch.int8), torch.ones(1))
    assert e.value.status == 8 and e.value.status_name == "invalid"
    with pytest.raises(RequestError) as e:
        client.register("nope", 4, 8, torch.zeros(4, 8, dtype=torch.int8))
    assert e.value.status in (1, 8)
    with pytest.raises(ValueError, match="3 scales given, the layer .* has 1"):
        client.register("i2s", 4, 8, torch.zeros(4, 8, dtype=torch.int8), torch.ones(3))
    with pytest.raises(RequestError) as e:
        client.free(987654)
    assert e.value.status_name == "not_found"
    client.ping()  # the session is fine after refusals
    assert client.stats()["session"]["uploads"] == 0  # failed uploads were aborted


def test_layers_are_freed_with_their_modules(client):
    before = client.stats()["session"]["layers"]
    infos = [_register(client, _layer(QuantConfig(format="tl1"), seed=i)) for i in range(3)]
    assert client.stats()["session"]["layers"] == before + 3
    for info in infos:
        client.free_later(info["id"])
    assert client.stats()["session"]["layers"] == before
    import gc
    gc.collect()  # earlier tests' modules: their frees are queued now, flushed by stats
    c2 = bitgo.default_client()
    n0 = c2.stats()["session"]["layers"]
    b = _layer(QuantConfig(format="i2s"))
    assert c2.stats()["session"]["layers"] == n0 + 1
    del b
    gc.collect()
    assert c2.stats()["session"]["layers"] == n0


def test_state_dict_load_and_deepcopy_register_again():
    import copy
    a = _layer(QuantConfig(format="i2s"), seed=1)
    b = _layer(QuantConfig(format="i2s"), seed=2)
    h = b.handle
    b.load_state_dict(a.state_dict())
    assert b.handle not in (0, h)
    x = torch.randn(2, 200)
    assert_bits_equal(b(x), a(x))
    c = copy.deepcopy(a)
    assert c.handle == 0 and c.remote is None
    assert_bits_equal(c(x), a(x))
    assert c.handle not in (0, a.handle)


def test_reference_backend_keeps_layers_off_bitd():
    bitgo.set_backend("reference")
    try:
        b = _layer(QuantConfig(format="i2s"))
        assert b.handle == 0
        x = torch.randn(2, 200)
        assert_bits_equal(b(x), R.linear(b, x))
    finally:
        bitgo.set_backend("bitd")
    with pytest.raises(ValueError, match="allowed backends are bitd, reference"):
        bitgo.set_backend("gpu")


# -- bad inputs ---------------------------------------------------------------------------


def test_bad_inputs_are_clear_errors(client):
    b = _layer(QuantConfig(format="i2s"), k=64, m=16)
    info = _register(client, b)
    lid = info["id"]
    with pytest.raises(ValueError, match="last dimension must be the layer's in_features = 64"):
        client.forward(lid, torch.randn(2, 63))
    with pytest.raises(ValueError, match="not contiguous"):
        client.forward(lid, torch.randn(64, 2).t())
    with pytest.raises(ValueError, match="x is on device meta"):
        client.forward(lid, torch.empty(2, 64, device="meta"))
    with pytest.raises(TypeError, match="dtype torch.float64"):
        client.forward(lid, torch.randn(2, 64, dtype=torch.float64))
    with pytest.raises(ValueError, match="not registered with this client"):
        client.forward(lid + 1000, torch.randn(2, 64))
    x = torch.randn(3, 64)
    x[2, 7] = float("nan")
    with pytest.raises(RequestError, match="(?i)token 2, .*7.*nan") as e:
        client.forward(lid, x)
    assert e.value.status_name == "non_finite"
    x[2, 7] = float("-inf")
    with pytest.raises(ValueError, match="(?i)inf"):
        b(x)
    # through the module and the op
    with pytest.raises(ValueError, match="in_features = 64"):
        b(torch.randn(5, 65))
    with pytest.raises(ValueError, match="not contiguous"):
        bitgo.linear(torch.randn(64, 2).t(), b.packed, b.scales, b.bias, b._spec, b.handle)
    with pytest.raises(ValueError, match="input is on device meta"):
        bitgo._ops._linear_impl(torch.empty(2, 64, device="meta"), b.packed, b.scales,
                                b.bias, b._spec, b.handle)
    client.ping()
    assert_bits_equal(client.forward(lid, x[:2]), R.linear(b, x[:2]))  # still usable


def test_empty_batch(client):
    b = _layer(QuantConfig(format="i2s"), k=64, m=16)
    y = b(torch.randn(0, 64))
    assert y.shape == (0, 16)


# -- connecting and the embedded default -------------------------------------------------------


def test_socket_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv("BITD_SOCKET", raising=False)
    with pytest.raises(DaemonError, match="connecting to bitd at .*nowhere.sock"):
        Client(str(tmp_path / "nowhere.sock"))
    monkeypatch.setenv("BITD_SOCKET", str(tmp_path / "env.sock"))
    with pytest.raises(DaemonError, match="env.sock"):
        Client()
    # a daemon at BITD_SOCKET is used, and two clients share it
    owner = Client(embedded=True)
    try:
        monkeypatch.setenv("BITD_SOCKET", owner.socket_path)
        c = Client()
        assert c.how == "BITD_SOCKET" and c.server_pid == owner.server_pid and c.daemon is None
        c.close()
        # nothing at the default path: the embedded default starts a private daemon
        monkeypatch.delenv("BITD_SOCKET")
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
        c = Client()
        assert c.how == "embedded" and c.daemon is not None and c.daemon.alive()
        pid = c.daemon.pid
        with pytest.raises(DaemonError, match="connecting"):
            Client(embedded=False)
        c.close()
        assert not c.daemon.alive() and not os.path.exists(c.socket_path)
        with pytest.raises(DaemonError, match="closed"):
            c.ping()
        # a daemon at the default path is found
        monkeypatch.setenv("XDG_RUNTIME_DIR", os.path.dirname(owner.socket_path))
        c = Client()
        assert c.how == "default socket" and c.server_pid == owner.server_pid
        c.close()
        assert pid != owner.server_pid
    finally:
        owner.close()


def test_missing_binary_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("BITD_BIN", str(tmp_path / "no-bitd"))
    with pytest.raises(DaemonError, match="BITD_BIN=.*no-bitd: not an executable"):
        Client(embedded=True)


def test_daemon_that_fails_to_start_reports_its_stderr(monkeypatch, tmp_path):
    fake = tmp_path / "bitd"
    fake.write_text("#!/bin/sh\necho 'bitd: cannot start: no such flag' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("BITD_BIN", str(fake))
    with pytest.raises(DaemonError, match=r"(?s)exited with status 3.*no such flag"):
        Client(embedded=True)


def test_private_daemon_dies_with_its_parent(tmp_path):
    code = textwrap.dedent("""
        import os, sys
        sys.path.insert(0, %r)
        from bitgo.client import Client
        c = Client(embedded=True)
        print(c.daemon.pid, flush=True)
        os._exit(0)   # no atexit: only the parent-death signal can stop the daemon
    """ % str(REPO / "pyclient"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[0])
    deadline = time.time() + 10
    while time.time() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), f"bitd {pid} outlived its parent"


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_client_from_a_short_lived_thread_keeps_its_daemon():
    box = []
    t = threading.Thread(target=lambda: box.append(Client(embedded=True)))
    t.start()
    t.join()
    c = box[0]
    try:
        time.sleep(0.3)  # PR_SET_PDEATHSIG would have fired with the thread by now
        assert c.daemon.alive()
        c.ping()
    finally:
        c.close()


# -- faults -----------------------------------------------------------------------------------


def _slow_layer(c):
    """A layer whose forward takes a while (large f32 product)."""
    k, m = 2048, 2048
    w = torch.randn(m, k)
    info = c.register("f32", m, k, w)
    return info["id"], torch.randn(256, k)


def test_killed_daemon_mid_call_raises_quickly():
    import bitgo.client as bc
    c = Client(embedded=True)
    lid, x = _slow_layer(c)
    box = {}

    def call():
        try:
            while True:  # until the kill lands in a call
                c.forward(lid, x)
        except BaseException as e:
            box["err"] = e
        box["t"] = time.perf_counter()

    th = threading.Thread(target=call)
    th.start()
    w = c._w
    deadline = time.time() + 30
    while time.time() < deadline:  # a request is published and not answered: mid-call
        if w[bc._REQ_SEQ] != w[bc._RESP_SEQ]:
            break
    os.kill(c.daemon.pid, signal.SIGKILL)
    killed = time.perf_counter()
    th.join(10)
    assert not th.is_alive(), "the call hung after the daemon died"
    err = box.get("err")
    assert isinstance(err, DaemonError), repr(err)
    assert box["t"] - killed < 2.0, f"noticed after {box['t'] - killed:.3f} s"
    assert "during forward" in str(err) and "SIGKILL" in str(err) and "stderr" in str(err)
    with pytest.raises(DaemonError, match="SIGKILL"):  # sticky
        c.ping()
    with pytest.raises(DaemonError):
        c.forward(lid, x[:1])
    c.close()


def test_killed_daemon_between_calls():
    c = Client(embedded=True)
    info = _register(c, _layer(QuantConfig(format="i2s")))
    c.daemon.proc.kill()
    c.daemon.proc.wait()
    t0 = time.perf_counter()
    with pytest.raises(DaemonError, match="bitd"):
        c.forward(info["id"], torch.randn(1, 200))
    assert time.perf_counter() - t0 < 2.0
    c.close()


def test_stopped_daemon_times_out():
    c = Client(embedded=True, call_timeout=0.5)
    try:
        os.kill(c.daemon.pid, signal.SIGSTOP)
        deadline = time.time() + 5
        while _state(c.daemon.pid) != "T" and time.time() < deadline:
            time.sleep(0.001)  # kill returns before every thread has stopped
        t0 = time.perf_counter()
        with pytest.raises(DaemonError, match="did not answer ping within 0.5 s"):
            c.ping()
        assert time.perf_counter() - t0 < 3.0
    finally:
        if c.daemon.alive():
            os.kill(c.daemon.pid, signal.SIGCONT)
        c.close()


def test_daemon_shutdown_is_reported():
    c = Client(embedded=True)
    c.ping()
    os.kill(c.daemon.pid, signal.SIGTERM)
    c.daemon.proc.wait(10)
    with pytest.raises(DaemonError, match="(?i)shutting_down|closed|died"):
        c.ping()
    c.close()


# -- threads and processes ------------------------------------------------------------------


def test_threads_share_a_client(client):
    layers = [_layer(QuantConfig(format=f), k=96, m=64, seed=i)
              for i, f in enumerate(("i2s", "int2", "bf16", "tl2"))]
    infos = [_register(client, b) for b in layers]
    errors = []

    def work(i):
        try:
            g = torch.Generator().manual_seed(i)
            for j in range(60):
                b, info = layers[j % 4], infos[j % 4]
                x = torch.randn(1 + j % 5, 96, generator=g)
                y = client.forward(info["id"], x)
                assert_bits_equal(y, R.linear(b, x), f"thread {i} call {j}")
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors[0]


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_forked_child_refuses_the_parents_client(client):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        try:
            client.ping()
            msg = b"no error"
        except DaemonError as e:
            msg = str(e).encode()[:500]
        except BaseException as e:
            msg = repr(e).encode()[:500]
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    msg = os.read(r, 1000).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert "forked" in msg, msg
    client.ping()  # the parent's session is untouched


def test_interrupted_call_keeps_calls_and_answers_paired(monkeypatch):
    import bitgo.client as bc
    c = Client(embedded=True)
    try:
        lid, x = _slow_layer(c)
        b = _layer(QuantConfig(format="i2s"), k=64, m=16)
        small = _register(c, b)

        def interrupt(*args):
            raise KeyboardInterrupt

        # Ctrl-C while the call waits, spinning or (if its spin budget ran out before the
        # first look, as it can on a first call) sleeping
        monkeypatch.setattr(bc, "_sched_yield", interrupt)
        monkeypatch.setattr(bc._sys, "futex_wait", interrupt)
        with pytest.raises(KeyboardInterrupt):
            c.forward(lid, x)
        monkeypatch.undo()
        assert c._inflight is not None
        xs = torch.randn(3, 64)
        assert_bits_equal(c.forward(small["id"], xs), R.linear(b, xs))  # not the old answer
        assert c._inflight is None
        assert c._w[bc._CLIENT_SLEEPING] == 0
        c.ping()
    finally:
        c.close()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_forked_child_can_start_its_own_daemon():
    box = []
    t = threading.Thread(target=lambda: box.append(Client(embedded=True)))
    t.start()
    t.join()  # the launcher thread now exists in this process
    box[0].close()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        msg = b"?"
        try:
            res = []
            th = threading.Thread(target=lambda: res.append(Client(embedded=True)))
            th.start()
            th.join(20)
            if res:
                res[0].ping()
                res[0].close()
                msg = b"ok"
            else:
                msg = b"hung"
        except BaseException as e:
            msg = repr(e).encode()[:300]
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    msg = os.read(r, 400)
    os.close(r)
    os.waitpid(pid, 0)
    assert msg == b"ok", msg


def test_packed_blobs_name_their_layout(client, monkeypatch):
    """Packed uploads name reference.LAYOUT; bitd refuses a blob whose revision lays its
    format out otherwise (a kernels/4 to kernels/7 tl2 blob, a kernels/4 to kernels/8 int1
    blob: the first revision after it that changed the format's layout is named, whatever
    the blob's shape), and reads the formats unchanged since."""
    tl2 = _layer(QuantConfig(format="tl2"), seed=5)
    int1 = _layer(QuantConfig(format="int1"), seed=5)
    i2s = _layer(QuantConfig(format="i2s"), seed=5)
    for rev, changed in (("kernels/4", "kernels/5"), ("kernels/5", "kernels/6"),
                         ("kernels/6", "kernels/7"), ("kernels/7", "kernels/8")):
        monkeypatch.setattr(R, "LAYOUT", rev)
        with pytest.raises(RequestError, match=f"tl2 blobs changed layout in {changed}, "
                                               f"after {rev}") as e:
            _register(client, tl2)
        assert e.value.status == 8  # invalid
        with pytest.raises(RequestError, match=f"int1 blobs changed layout in kernels/9, "
                                               f"after {rev}") as e:
            _register(client, int1)
        assert e.value.status == 8
        info = _register(client, i2s)
        x = torch.randn(2, 200)
        assert_bits_equal(client.forward(info["id"], x), R.linear(i2s, x))
        client.free(info["id"])
    monkeypatch.setattr(R, "LAYOUT", "kernels/8")  # tl2 as now; int1 changed in kernels/9
    with pytest.raises(RequestError, match="int1 blobs changed layout in kernels/9, "
                                           "after kernels/8") as e:
        _register(client, int1)
    assert e.value.status == 8
    info = _register(client, tl2)
    x = torch.randn(2, 200)
    assert_bits_equal(client.forward(info["id"], x), R.linear(tl2, x))
    client.free(info["id"])
