"""What run.json records of a `distill` run's teacher and --data, so that --resume can tell when either is no
longer what the run started on (a checkpoint trained on one teacher, continued on another, is a model of neither,
and run.json would no longer say what made it).

- The teacher (`teacher_weights`): the digest of every tensor of the loaded teacher as the run computes with it
  (targets.module_digest, the one the teacher-target cache is keyed by: computed once per run, and handed to the
  cache), with the dtype it was loaded in. A resume in another dtype (another device or --precision) loads the
  teacher once more in the recorded dtype to compare like with like.
- The running text (`prepared_data`): shards and sequences, and a digest of the data's sequence length, tokenizer
  and each shard's name, sequence count, size and sampled digest (corpus.manifest.shard_digest: its size and
  first and last 64 KiB). `PreparedData.open` has already checked every shard against the manifest's digest, so
  this costs nothing more than reading the manifest: a re-run `prepare`, a shard swapped, cut or extended is
  caught; a same-size edit in the middle of a shard is not (its ids are still checked against the vocabulary as
  they are read). A full hash would read and hash every byte of the corpus at every resume: at the 0.25-0.8 GB/s
  one core hashes (blake2b, sha256), 13-40 s per 10 GB before the disk's own read time.

The other inputs have records of their own (each input's module in distillation/inputs), whose digests cover
their whole text and are checked the same way.

A run record written before these entries existed resumes unchecked, with a log line, and is given them."""

from __future__ import annotations

import hashlib
from pathlib import Path

from mlminilm import logging as mlog
from mlminilm.corpus.manifest import shard_digest
from mlminilm.errors import CheckpointError
from mlminilm.training.run_dir import RUN_RECORD

log = mlog.get("mlminilm.distill")  # the command's own logger

TEACHER_KEY = "teacher_weights"
DATA_KEY = "prepared_data"
DTYPES = ("float32", "bfloat16", "float16")  # what a teacher is loaded in (training.runtime.setup_runtime)
NEW_RUN = "as a new run (another --out, or --overwrite)"


def data_record(data) -> dict | None:
    """What run.json records of the prepared running text (`prepared_data`); None for a run without --data."""
    manifest, root = getattr(data, "manifest", None), getattr(data, "root", None)
    if not manifest or root is None:
        return None
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{manifest['seq_len']}|{manifest['tokenizer'].get('vocab_sha256')}|".encode())
    shards = sequences = 0
    for lang in sorted(manifest["languages"]):
        for shard in manifest["languages"][lang]["shards"]:
            # The manifest's digest was checked against the file at open; an older manifest's is taken now.
            digest = shard.get("digest") or shard_digest(Path(root) / shard["file"])
            h.update(f"{lang}|{shard['file']}|{shard['sequences']}|{shard.get('bytes')}|{digest}\0".encode())
            shards, sequences = shards + 1, sequences + shard["sequences"]
    return {"shards": shards, "sequences": sequences, "digest": h.hexdigest()}


def teacher_record(digest: str, dtype) -> dict:
    """What run.json records of the teacher (`teacher_weights`): its digest as loaded in `dtype`."""
    return {"digest": digest, "dtype": str(dtype).replace("torch.", "")}


def check_same_data(old: dict, record: dict, out: Path) -> None:
    """On --resume with the same --data path: CheckpointError unless its shards are those the run recorded."""
    recorded, now = old.get(DATA_KEY), record.get(DATA_KEY)
    if recorded is None or now is None or old.get("config", {}).get("data") != record["config"]["data"]:
        return  # an older record (told in `unrecorded`), or another --data: the options' check names that
    if recorded == now:
        return
    if not isinstance(recorded, dict):
        raise _damaged(out, DATA_KEY, "data")

    def counted(r: dict) -> str:
        return f"{r.get('shards')} shards of {r.get('sequences')} sequences"

    what = (
        f"{counted(recorded)} when the run started, {counted(now)} now"
        if counted(recorded) != counted(now)
        else f"the same {counted(now)}, other content"
    )
    raise CheckpointError(
        f"--resume: --data {record['config']['data']} changed since the run in {out} started ({what}; run.json "
        f"records what it trained on); resume with the data as it was, or train on the new data {NEW_RUN}"
    )


def check_same_teacher(old: dict, record: dict, out: Path, digest_in) -> None:
    """On --resume: CheckpointError unless the teacher's digest equals the recorded one. `digest_in(dtype)`: the
    teacher's digest loaded in another dtype (the recorded one, when the run now computes in another)."""
    recorded, now = old.get(TEACHER_KEY), record[TEACHER_KEY]
    if recorded is None:
        return  # an older record: told in `unrecorded`
    shaped = isinstance(recorded, dict) and isinstance(recorded.get("digest"), str)
    if not shaped or recorded.get("dtype") not in DTYPES:
        raise _damaged(out, TEACHER_KEY, "teacher")
    digest = now["digest"] if recorded.get("dtype") == now["dtype"] else digest_in(recorded.get("dtype"))
    if digest == recorded["digest"]:
        return
    teacher = record["config"]["teacher"]
    raise CheckpointError(
        f"--resume: teacher {teacher} is not the one the run in {out} started with (the digest of its weights in "
        f"{recorded.get('dtype')} was {recorded['digest'][:12]}, now {digest[:12]}: its files changed); put the "
        f"teacher's weights back as they were to resume, or train on this teacher {NEW_RUN}"
    )


def _damaged(out: Path, key: str, what: str) -> CheckpointError:
    return CheckpointError(
        f"run record {Path(out) / RUN_RECORD} is damaged (its {key!r} is not what mlminilm records): it cannot tell "
        f"which {what} this run started on; delete that entry to resume without the check, or "
        "start over with --overwrite"
    )


def unrecorded(old: dict, record: dict, out: Path) -> dict:
    """What an older run record lacks of the teacher and the data (the entries to add to it), each said in a log
    line: that resume cannot check it."""
    missing = {k: record[k] for k in (TEACHER_KEY, DATA_KEY) if record.get(k) is not None and k not in old}
    if missing:
        what = " and ".join("the teacher" if k == TEACHER_KEY else "--data" for k in missing)
        log.info(
            "%s records no digest of %s (written by an older mlminilm): this resume cannot check that the run goes "
            "on with what it started on; recorded now, later resumes are checked",
            Path(out) / RUN_RECORD,
            what,
        )
    return missing
