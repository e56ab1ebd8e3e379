"""Bad input to `distill` and `assist`, in-process: prepared data that is missing, edited, truncated or holds ids
outside the vocabulary, a teacher whose vocabulary differs, damaged gzip inputs. One `Error:` line (exit 1)
with what to do, never a traceback, nothing on stdout, no partial output."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from helpers import assert_error, one_step_distill_args, run_main, save_tiny_teacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def assist_args(teacher, data, out, *extra: str) -> list[str]:
    return [
        "assist",
        "--teacher",
        str(teacher),
        "--data",
        str(data),
        "--out",
        str(out),
        "--layers",
        "2",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--intermediate",
        "64",
        "--assistant-steps",
        "1",
        "--student-steps",
        "1",
        *extra,
    ]


# --------------------------------------------------------------------------------------- distill: exit 1


def _copy_data(data: Path, to: Path) -> Path:
    shutil.copytree(data, to)
    return to


def test_distill_bad_data(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"

    def distill(data_dir):
        return run_main(monkeypatch, capsys, *one_step_distill_args(wp_teacher, data_dir, out))

    assert_error(distill(tmp_path / "missing"), "prepare")
    # A manifest whose shard path leads out of the data directory.
    bad = _copy_data(wp_data, tmp_path / "escape")
    manifest = json.loads((bad / "manifest.json").read_text())
    lang = sorted(manifest["languages"])[0]
    shard = manifest["languages"][lang]["shards"][0]
    assert shard["bytes"] == (bad / shard["file"]).stat().st_size and len(shard["digest"]) == 32  # recorded by prepare
    manifest["languages"][lang]["shards"][0]["file"] = "../../etc/passwd"
    (bad / "manifest.json").write_text(json.dumps(manifest))
    assert_error(distill(bad), "inside the data directory", "prepare")
    # A value of the wrong type.
    manifest["languages"][lang]["shards"][0]["file"] = f"shards/{lang}-00000.bin"
    manifest["seq_len"] = "32"
    (bad / "manifest.json").write_text(json.dumps(manifest))
    assert_error(distill(bad), "seq_len must be an integer")
    # A shard changed since prepare: same size, other bytes.
    changed = _copy_data(wp_data, tmp_path / "changed")
    shard = changed / "shards" / f"{lang}-00000.bin"
    raw = bytearray(shard.read_bytes())
    raw[8:12] = bytes(reversed(raw[8:12])) if raw[8:12] != bytes(reversed(raw[8:12])) else b"\x01\x00\x00\x00"
    shard.write_bytes(bytes(raw))
    assert_error(distill(changed), "digest")
    # A truncated shard.
    truncated = _copy_data(wp_data, tmp_path / "truncated")
    shard = truncated / "shards" / f"{lang}-00000.bin"
    shard.write_bytes(shard.read_bytes()[:-4])
    assert_error(distill(truncated), "bytes, expected")
    assert not out.exists()


def test_distill_out_is_a_file_and_student_larger_than_teacher(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "file"
    out.write_text("mine")
    assert_error(run_main(monkeypatch, capsys, *one_step_distill_args(wp_teacher, wp_data, out)), "is a file")
    assert out.read_text() == "mine"
    # A student deeper than its 4-layer teacher trains, with a warning.
    code, stdout, stderr = run_main(
        monkeypatch, capsys, *one_step_distill_args(wp_teacher, wp_data, tmp_path / "big"), "--layers", "5"
    )
    assert code == 0, stderr
    assert "larger than teacher" in stderr and "layers 5 > 4" in stderr


def test_distill_vocabulary_mismatch_says_what_differs(
    wp_teacher, wp_data, tiny_sentencepiece_dir, tiny_corpus_dir, tmp_path, monkeypatch, capsys
):
    from transformers import AutoTokenizer

    # Same ids count, other tokens: a WordPiece tokenizer with two tokens swapped.
    tok = AutoTokenizer.from_pretrained(wp_teacher)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    words = [w for w, _ in vocab]
    words[10], words[11] = words[11], words[10]
    other = tmp_path / "other-teacher"
    shutil.copytree(wp_teacher, other)
    (other / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (other / "tokenizer.json").unlink(missing_ok=True)
    line = assert_error(
        run_main(monkeypatch, capsys, *one_step_distill_args(other, wp_data, tmp_path / "o")),
        "another tokenizer",
        f"both have {len(words)} ids",
        "different tokens or ids",
    )
    # Said once, not "(N ids), not ... (N ids)"; counted as "N ids" since the paths and digests in the line may
    # hold the digits N by chance.
    assert line.count(f"{len(words)} ids") == 1
    # Another size: both sizes are named.
    sp_teacher = save_tiny_teacher(tiny_sentencepiece_dir, tmp_path / "sp", kind="xlm-roberta")
    assert_error(
        run_main(monkeypatch, capsys, *one_step_distill_args(sp_teacher, wp_data, tmp_path / "o")),
        f"the data's has {len(words)} ids",
    )


def test_distill_vocabulary_must_fit_the_embedding_rows(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    small = tmp_path / "small-embeddings"
    shutil.copytree(wp_teacher, small)
    config = json.loads((small / "config.json").read_text())
    config["vocab_size"] = 50  # the tokenizer has ~600 ids: most of the data's ids have no embedding row
    (small / "config.json").write_text(json.dumps(config))
    assert_error(
        run_main(monkeypatch, capsys, *one_step_distill_args(small, wp_data, tmp_path / "o")), "embedding rows", "50"
    )


# ---------------------------------------------------------------------------------------- assist: exit 1


def test_assist_bad_input(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    file = tmp_path / "file"
    file.write_text("mine")
    assert_error(run_main(monkeypatch, capsys, *assist_args(wp_teacher, wp_data, file)), "is a file")
    assert_error(
        run_main(monkeypatch, capsys, *assist_args(wp_teacher, tmp_path / "nodata", tmp_path / "o")), "prepare"
    )
    assert not (tmp_path / "o").exists()


def _shard_with_ids_outside(data: Path, to: Path, record: str) -> tuple[Path, str]:
    """A copy of prepared data whose first de shard holds -1 and vocab_size + 5 (in each of its sequences, so that
    training reads them), edited by hand with its digest brought up to date. `record`: "true" (the manifest records
    the shard's real id range), "none" (no ranges at all, as an older prepare wrote) or "stale" (the range recorded
    before the edit)."""
    import numpy as np

    from mlminilm.corpus.manifest import shard_digest

    shutil.copytree(data, to)
    manifest = json.loads((to / "manifest.json").read_text())
    shard = manifest["languages"]["de"]["shards"][0]
    ids = np.fromfile(to / shard["file"], dtype="<i4").reshape(shard["sequences"], manifest["seq_len"])
    ids[:, 1], ids[:, 2] = -1, manifest["tokenizer"]["vocab_size"] + 5
    ids.tofile(to / shard["file"])
    shard["digest"] = shard_digest(to / shard["file"])
    for info in manifest["languages"].values():
        for entry in info["shards"]:
            if record == "none":
                entry.pop("id_range", None)
    if record == "true":
        shard["id_range"] = [int(ids.min()), int(ids.max())]
    (to / "manifest.json").write_text(json.dumps(manifest))
    return to, shard["file"]


def test_prepare_records_each_shards_token_id_range(wp_data):
    import numpy as np

    from mlminilm.corpus.dataset import PreparedData

    manifest = json.loads((wp_data / "manifest.json").read_text())
    vocab = manifest["tokenizer"]["vocab_size"]
    for info in manifest["languages"].values():
        for shard in info["shards"]:
            ids = np.fromfile(wp_data / shard["file"], dtype="<i4")
            assert shard["id_range"] == [int(ids.min()), int(ids.max())]
    lowest, highest = PreparedData.open(wp_data).token_id_range()
    assert 0 <= lowest <= highest < vocab


@pytest.mark.parametrize("record", ["true", "none", "stale"])
def test_token_ids_outside_the_vocabulary_are_one_line(record, wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    """They used to end in `IndexError: index out of range in self` from the embedding (a CUDA assert on a GPU)."""
    data, shard = _shard_with_ids_outside(wp_data, tmp_path / "data", record)
    out = tmp_path / "out"
    line = assert_error(
        run_main(monkeypatch, capsys, *one_step_distill_args(wp_teacher, data, out)), shard, "-1..", "prepare"
    )
    if record == "stale":
        # The recorded range says nothing is wrong: the sequence read during training is checked, before the model.
        assert "changed since prepare" in line
        assert not (out / "student").exists() and not (out / "checkpoints").exists()
    else:  # checked at open, from the manifest or by reading the shards: before anything is written
        assert "outside the tokenizer's 0.." in line
        assert not out.exists()


def _damaged_gzip(path: Path, text: str) -> Path:
    """Lines of `text` (numbered, so they do not compress to nothing) gzipped, the deflate stream damaged mid-way:
    reading it raises zlib.error (checked here)."""
    import zlib

    good = gzip.compress("".join(f"{i} {text}" for i in range(2000)).encode(), mtime=0)
    for at in range(len(good) // 3, 10, -1):  # the furthest byte in the first third whose flip breaks the stream
        damaged = good[:at] + bytes([good[at] ^ 0xFF]) + good[at + 1 :]
        try:
            gzip.decompress(damaged)
        except zlib.error:
            path.write_bytes(damaged)
            return path
        except (OSError, EOFError):  # a CRC or length error: not the case wanted here
            continue
    raise AssertionError("no single flipped byte damages the deflate stream")


def test_a_damaged_gzip_input_is_one_line_naming_it(wp_teacher, wp_data, task_files, tmp_path, monkeypatch, capsys):
    """Issue 37: a .gz whose deflate stream is damaged was a zlib.error traceback in --parallel (TSV and OPUS file
    pairs) and in finetune --train (every reader of mlminilm.tasks.textfile.read_text)."""
    tsv = _damaged_gzip(tmp_path / "en-de.tsv.gz", "The dog runs.\tDer Hund läuft.\n")
    opus = tmp_path / "opus"
    opus.mkdir()
    with gzip.open(opus / "talks.de-en.en.gz", "wt", encoding="utf-8") as handle:
        handle.write("The dog runs.\n" * 4000)
    _damaged_gzip(opus / "talks.de-en.de.gz", "Der Hund läuft.\n")
    shape = ["--layers", "2", "--hidden", "64", "--heads", "4", "--intermediate", "128", "--max-steps", "1"]
    for parallel, named in ((tsv, tsv), (opus, opus / "talks.de-en.de.gz")):
        args = ["distill", "--teacher", str(wp_teacher), "--data", str(wp_data), "--out", str(tmp_path / "run")]
        line = assert_error(
            run_main(monkeypatch, capsys, *args, *shape, "--parallel", str(parallel)), str(named), "gzip"
        )
        assert "download or compress it again" in line
    train = _damaged_gzip(tmp_path / "train-en.tsv.gz", task_files["nli"].read_text(encoding="utf-8"))
    line = assert_error(
        run_main(
            monkeypatch,
            capsys,
            "finetune",
            "--model",
            str(wp_teacher),
            "--out",
            str(tmp_path / "ft"),
            "--train",
            str(train),
        ),
        str(train),
        "gzip",
    )
    assert not (tmp_path / "run").exists() and not (tmp_path / "ft").exists()


def test_a_missing_opus_partner_is_named_as_the_missing_one(wp_teacher, wp_data, tmp_path, monkeypatch, capsys):
    """Issue 37: `--parallel talks.de-en.de` without talks.de-en.en said "talks.de-en.en has no partner file
    .../talks.de-en.en": the missing file as the one lacking itself."""
    (tmp_path / "talks.de-en.de").write_text("Der Hund läuft.\n", encoding="utf-8")
    shape = ["--layers", "2", "--hidden", "64", "--heads", "4", "--intermediate", "128", "--max-steps", "1"]
    args = ["distill", "--teacher", str(wp_teacher), "--data", str(wp_data), "--out", str(tmp_path / "run")]
    line = assert_error(
        run_main(monkeypatch, capsys, *args, *shape, "--parallel", str(tmp_path / "talks.de-en.de")),
        "talks.de-en.de has no partner file",
        f"{tmp_path / 'talks.de-en.en'} is missing",
    )
    assert "talks.de-en.en has no partner" not in line
