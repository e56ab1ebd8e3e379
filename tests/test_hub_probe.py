"""A hub id that is not in the cache, with no network: one `Error:` line within seconds, whether HF_HUB_OFFLINE is
set or not (without the probe, huggingface_hub's retries took up to 50 s and a dozen log lines). No network is
used: the Hub is pointed at local addresses. No wall clock either: the connections are counted (one probe, no
retries), and the probe's deadline is read from a fake clock."""

from __future__ import annotations

import socket
import threading

from helpers import run_main


def counted_connections(monkeypatch) -> list:
    """The address of every TCP connection this process attempts from now on (the probe's and any loader's)."""
    attempts, connect = [], socket.socket.connect

    def counted(sock, address):
        attempts.append(address)
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", counted)
    return attempts


def test_unreachable_hub_is_one_line_in_seconds(tmp_path, monkeypatch, capsys):
    """In seconds: one probe of at most PROBE_TIMEOUT_S (its deadline: the test below) and no loader's retries."""
    attempts = counted_connections(monkeypatch)
    for env, probes in (
        ({"HF_HUB_OFFLINE": None, "HF_ENDPOINT": "http://127.0.0.1:9"}, 1),
        ({"HF_HUB_OFFLINE": "1"}, 0),
    ):
        attempts.clear()
        code, out, err = run_main(
            monkeypatch,
            capsys,
            "eval-tatoeba",
            "--model",
            "someone/not-cached-model",
            "--data",
            str(tmp_path),
            env=env,
        )
        assert code == 1 and out == "", (env, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (env, err)
        assert "someone/not-cached-model" in lines[0] and "not in the Hugging Face cache" in lines[0]
        said = "127.0.0.1:9" if env.get("HF_ENDPOINT") else "HF_HUB_OFFLINE=1 is set"
        assert said in lines[0], lines[0]
        assert attempts == [("127.0.0.1", 9)] * probes, (env, attempts)  # offline: not even the probe


def test_probe_says_reachable_or_why_not(monkeypatch):
    from mlminilm.io.hub_probe import endpoint, unreachable

    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert endpoint() == "https://huggingface.co"
    with socket.socket() as server:  # a local listener stands for a reachable Hub
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert unreachable(f"http://127.0.0.1:{server.getsockname()[1]}") is None
    assert "127.0.0.1:9" in unreachable("http://127.0.0.1:9")
    assert "cannot resolve" in unreachable("https://no-such-host.invalid")  # .invalid never resolves (RFC 6761)
    # A proxy named for the scheme is what the first connection goes to.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert "127.0.0.1:9" in unreachable("https://huggingface.co")


def test_the_probe_gives_up_at_its_deadline(monkeypatch):
    """An attempt that never ends (a resolver or a connection that hangs) is given up once the clock reaches the
    deadline, PROBE_TIMEOUT_S after the start: not before, and not one look later."""
    from mlminilm.io import hub_probe

    release = threading.Event()

    def hang(address, timeout):
        release.wait(60)  # bounded: a probe that ignored its deadline fails below instead of hanging the suite
        raise TimeoutError  # what a real attempt ends with, long after the probe gave up

    monkeypatch.setattr(hub_probe.socket, "create_connection", hang)
    reads = []

    def clock():  # one second a read: the start, then each poll
        reads.append(100.0 + len(reads))
        return reads[-1]

    try:
        assert hub_probe.unreachable("http://10.0.0.1", clock=clock) == "no answer from 10.0.0.1:80 in 3 s"
    finally:
        release.set()  # the abandoned attempt's thread ends
    assert reads == [100.0, 101.0, 102.0, 103.0]  # the start, then polls until start + 3 s
    assert hub_probe.PROBE_TIMEOUT_S == 3.0


def test_trim_probes_an_unreachable_hub_once(tmp_path, monkeypatch, capsys):
    """trim resolves --model, then reads its config and tokenizer: an id the Hub cannot serve is one probe and one
    message (it was three probes, up to 9 s with no network, and the message twice when the reasons differed)."""
    from mlminilm.io import hub_probe

    calls = []

    def unreachable(url, timeout=hub_probe.PROBE_TIMEOUT_S):
        calls.append(url)
        return f"no answer from 10.0.0.1:80 in {timeout:g} s (probe {len(calls)})"  # each reason its own words

    monkeypatch.setattr(hub_probe, "unreachable", unreachable)
    (tmp_path / "data").mkdir()
    code, out, err = run_main(
        monkeypatch,
        capsys,
        "trim",
        "--model",
        "someone/not-cached-model",
        "--data",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "out"),
        env={"HF_HUB_OFFLINE": None, "HF_ENDPOINT": "http://10.0.0.1"},
    )
    assert code == 1 and out == "" and len(calls) == 1, (calls, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].count("someone/not-cached-model") == 1, err
    assert not (tmp_path / "out").exists()
