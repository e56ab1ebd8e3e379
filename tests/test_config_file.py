"""`--config FILE` (TOML, YAML, JSON; a run record replays its run): the file's options, the command line's winning,
unknown keys one error naming them all."""

from __future__ import annotations

import json

import pytest

from helpers import assert_error, run_main

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHAPE = {"layers": 2, "hidden": 32, "heads": 4, "intermediate": 64, "batch-size": 2, "save-every": 2}


def losses(out) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_toml_options_with_the_command_line_winning(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    config = tmp_path / "run.toml"
    config.write_text(
        "\n".join(
            [
                f'teacher = "{wp_teacher}"',
                f'data = "{wp_data}"',
                "max_steps = 4",
                "seed = 7",
                "quiet = true",
                *(f"{k} = {v}" for k, v in SHAPE.items()),
            ]
        )
        + "\n"
    )
    out = tmp_path / "run"
    code, _, err = run_main(
        monkeypatch, capsys, "distill", "--config", str(config), "--out", str(out), "--max-steps", "2"
    )
    assert code == 0, err
    recorded = json.loads((out / "run.json").read_text())["config"]
    assert recorded["max_steps"] == 2  # the command line's
    assert (recorded["seed"], recorded["layers"], recorded["hidden"], recorded["batch_size"]) == (7, 2, 32, 2)
    assert recorded["quiet"] is True  # a file may set --quiet like any option


def test_yaml_lists_and_flags(wp_teacher, tiny_corpus_dir, tmp_path, monkeypatch, capsys):
    config = tmp_path / "prepare.yaml"
    config.write_text(f"teacher: {wp_teacher}\ninput:\n  - {tiny_corpus_dir}\nseq-len: 16\nworkers: 1\n")
    out = tmp_path / "data"
    code, _, err = run_main(monkeypatch, capsys, "prepare", f"--config={config}", "--out", str(out))
    assert code == 0, err
    assert json.loads((out / "manifest.json").read_text())["seq_len"] == 16
    (out / "extra").write_text("")  # not prepare's: --overwrite from the file is honoured, and refused here
    config.write_text(config.read_text() + "overwrite: true\n")
    assert_error(run_main(monkeypatch, capsys, "prepare", "--config", str(config), "--out", str(out)), "extra")


def test_a_run_record_replays_its_run(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    args = [
        "--teacher",
        str(wp_teacher),
        "--data",
        str(wp_data),
        "--max-steps",
        "3",
        "--log-every",
        "1",
        "--dropout",
        "0.1",
        *(w for k, v in SHAPE.items() for w in (f"--{k}", str(v))),
    ]
    # Recorded with --quiet (as benchmarks run): the replay shows what its own command line says.
    assert run_main(monkeypatch, capsys, "distill", *args, "--quiet", "--out", str(first))[0] == 0
    code, _, err = run_main(monkeypatch, capsys, "distill", "--config", str(first / "run.json"), "--out", str(second))
    assert code == 0, err
    assert losses(second) == losses(first) and len(losses(first)) == 3
    old, new = (json.loads((d / "run.json").read_text())["config"] for d in (first, second))
    assert (old["quiet"], new["quiet"]) == (True, False)
    same = lambda c: {k: v for k, v in c.items() if k not in ("out", "quiet")}  # noqa: E731
    assert same(old) == same(new)
    assert_error(
        run_main(monkeypatch, capsys, "finetune", "--config", str(first / "run.json"), "--out", str(tmp_path / "ft")),
        "records a `distill` run",
        "mlminilm distill",
    )


def test_a_misspelt_key_gets_the_closest_option_names(tmp_path, monkeypatch, capsys):
    """Issue 55, item 8: `max-step` (or `max_step`) in a config file names `max-steps`, as the command line's
    "Possible options" does, instead of listing all ~60 options; only when no option is close are they listed."""
    config = tmp_path / "c.toml"
    for key in ("max-step", "max_step"):
        config.write_text(f"{key} = 10\n")
        error = assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(config)), "unknown option(s)")
        assert error.endswith(f"unknown option(s) {key} (did you mean max-steps?)"), error
    config.write_text("warmpu = 10\n")
    error = assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(config)))
    assert "warmpu (did you mean warmup?)" in error
    config.write_text("zzzz = 1\n")
    error = assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(config)))
    listed = error.split("the options of this command are: ")[1].split(", ")
    assert "unknown option(s) zzzz;" in error and "max-steps" in listed and "teacher" in listed and len(listed) > 40


def test_bad_config_files_are_one_line(wp_teacher, tmp_path, monkeypatch, capsys):
    config = tmp_path / "c.toml"
    config.write_text('max-steps = 3\nlayerz = 2\nfoo = "x"\n')
    error = assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(config)), "unknown option(s)")
    assert "foo (no option is close: see --help), layerz (did you mean layers?)" in error and "are:" not in error
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(bad)), "not readable JSON")
    (tmp_path / "c.ini").write_text("[x]\n")
    assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(tmp_path / "c.ini")), ".toml, .yaml")
    assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(tmp_path / "none.toml")), "no such file")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(tmp_path / "list.yaml")), "expected a table")
    config.write_text("overwrite = 3\n")
    assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(config)), "is a flag")
    assert_error(
        run_main(monkeypatch, capsys, "distill", "--config", str(config), "--config", str(config)), "more than once"
    )
    assert not list(tmp_path.glob("run*"))


def test_binary_files_alias_bombs_and_one_option_named_twice_are_one_line(tmp_path, monkeypatch, capsys):
    """Issue 27: a binary --config was a UnicodeDecodeError traceback, a 700-byte YAML alias bomb took 91 s and 4 GB
    before its refusal, and `max-steps` beside `max_steps` let the second win silently."""
    import time

    binary = tmp_path / "c.toml"
    binary.write_bytes(b"\xff\xfe\x00\x81max-steps = 3\n")
    assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(binary)), "not a text file", "UTF-8")
    bomb = tmp_path / "bomb.yaml"
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
        f"*a{i - 1}]"
        for i in range(1, 9)
    ]
    bomb.write_text("\n".join(lines) + "\n")
    assert len(bomb.read_bytes()) < 1000
    start = time.perf_counter()
    assert_error(run_main(monkeypatch, capsys, "distill", "--config", str(bomb)), "YAML alias (*a0)")
    assert time.perf_counter() - start < 5
    twice = tmp_path / "twice.toml"
    twice.write_text("max-steps = 3\nmax_steps = 5\n")
    assert_error(
        run_main(monkeypatch, capsys, "distill", "--config", str(twice)), "max-steps and max_steps name the same option"
    )
    assert not list(tmp_path.glob("run*"))


def test_one_key_given_twice_in_json_or_yaml_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    """Issue 37: JSON and YAML parsers keep the last of a key given twice, so `{"max-steps": 1, "max-steps": 2}`
    trained 2 steps; TOML refused it. Now every format refuses it, in one line naming the key."""
    files = {
        "twice.json": '{"max-steps": 1, "out": "x", "max-steps": 2}',
        "twice.yaml": "max-steps: 1\nout: x\nmax-steps: 2\n",
        "nested.json": '{"command": "distill", "config": {"seed": 1, "seed": 2}}',
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        line = assert_error(
            run_main(monkeypatch, capsys, "distill", "--config", str(tmp_path / name)), "is given twice", name
        )
        assert ("seed" if name == "nested.json" else "max-steps") in line
    assert ":3: max-steps is given twice" in assert_error(
        run_main(monkeypatch, capsys, "distill", "--config", str(tmp_path / "twice.yaml")), "twice.yaml"
    )
    assert not (tmp_path / "x").exists()


def test_a_flag_the_file_turns_on_is_turned_off_on_the_command_line(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    """Issue 37: a recipe's `freeze-embeddings = true` could not be undone (`--no-freeze-embeddings` did not exist),
    though an option typed on the command line wins over the file. Every flag now has its `--no-` side."""
    config = tmp_path / "recipe.toml"
    shape = {**SHAPE, "hidden": 64, "intermediate": 128}
    lines = [f'teacher = "{wp_teacher}"', f'data = "{wp_data}"', 'init = "teacher"', "freeze-embeddings = true"]
    config.write_text("\n".join([*lines, "max-steps = 1", *(f"{k} = {v}" for k, v in shape.items())]) + "\n")
    for out, typed, frozen in (("on", (), True), ("off", ("--no-freeze-embeddings",), False)):
        code, _, err = run_main(
            monkeypatch, capsys, "distill", "--config", str(config), "--out", str(tmp_path / out), *typed
        )
        assert code == 0, err
        assert json.loads((tmp_path / out / "run.json").read_text())["config"]["freeze_embeddings"] is frozen
