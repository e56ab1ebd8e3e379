"""A hub id that is not in the cache, with no network: one `Error:` line within seconds, whether HF_HUB_OFFLINE is
set or not (without the probe, huggingface_hub's retries took up to 50 s and a dozen log lines). No network is
used: the Hub is pointed at local addresses."""

from __future__ import annotations

import socket
import time

from helpers import run_main


def test_unreachable_hub_is_one_line_in_seconds(tmp_path, monkeypatch, capsys):
    for env in ({"HF_HUB_OFFLINE": None, "HF_ENDPOINT": "http://127.0.0.1:9"}, {"HF_HUB_OFFLINE": "1"}):
        start = time.perf_counter()
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
        elapsed = time.perf_counter() - start
        assert code == 1 and out == "", (env, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (env, err)
        assert "someone/not-cached-model" in lines[0] and "not in the Hugging Face cache" in lines[0]
        said = "127.0.0.1:9" if env.get("HF_ENDPOINT") else "HF_HUB_OFFLINE=1 is set"
        assert said in lines[0], lines[0]
        assert elapsed < 5, (env, elapsed)


def test_probe_says_reachable_or_why_not(monkeypatch):
    from mlminilm.io.hub_probe import endpoint, unreachable

    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert endpoint() == "https://huggingface.co"
    with socket.socket() as server:  # a local listener stands for a reachable Hub
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert unreachable(f"http://127.0.0.1:{server.getsockname()[1]}") is None
    assert "127.0.0.1:9" in unreachable("http://127.0.0.1:9")
    start = time.perf_counter()
    assert "cannot resolve" in unreachable("https://no-such-host.invalid")  # .invalid never resolves (RFC 6761)
    assert time.perf_counter() - start < 5
    # A proxy named for the scheme is what the first connection goes to.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert "127.0.0.1:9" in unreachable("https://huggingface.co")


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
