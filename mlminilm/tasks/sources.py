"""`finetune`'s English task data: examples of a local file (any NLI format; SQuAD JSON) or of a Hugging Face
Hub dataset (hf:NAME[:SPLIT])."""

from __future__ import annotations

from pathlib import Path

from mlminilm.errors import DataError, MlminilmError
from mlminilm.tasks.xnli import NLIExample, label_id, read_nli

# Hub datasets accepted as bare names (any other Hub dataset: hf:NAME[:SPLIT]).
HUB_NAMES = ("multi_nli", "nyu-mll/multi_nli", "xnli", "facebook/xnli", "squad", "rajpurkar/squad")


def _is_hub(source: str) -> bool:
    return source.startswith("hf:") or (source in HUB_NAMES and not Path(source).exists())


def load_examples(task: str, source: str, role: str) -> list:
    """English examples of a local file (any NLI format; SQuAD JSON) or a Hub dataset (hf:NAME[:SPLIT])."""
    if _is_hub(source):
        return _load_hub(task, source.removeprefix("hf:"), role)
    path = Path(source)
    if path.is_dir():
        raise DataError(f"--{role} {source} is a directory; give a file")
    if not path.is_file():
        raise DataError(f"--{role} {source}: no such file (or name a Hub dataset: hf:multi_nli, hf:squad)")
    if task == "xnli":
        return read_nli(path, "en")  # with a language column (XNLI-1.0), only its English rows
    from mlminilm.tasks.squad import read_squad

    # Training data may repeat question ids (XTREME's TyDiQA-GoldP English train does); dev ids must be unique.
    examples = read_squad(path, unique_ids=role == "dev").examples
    if role == "train" and not any(a["text"].strip() for e in examples for a in e.answers):
        # Every feature's target would be "no answer" (the CLS token): the model would learn to find nothing.
        raise DataError(f"{path}: no training question has an answer (an unlabelled file?); --train needs answers")
    if role == "dev":
        unanswered = [e.id for e in examples if not e.answers]
        if unanswered:
            raise DataError(f"{path}: dev question {unanswered[0]!r} has no gold answer ({len(unanswered)} such)")
        if not any(a["text"].strip() for e in examples for a in e.answers):
            raise DataError(
                f"{path}: every gold answer is empty (an unlabelled file?); dev needs real answers to select on"
            )
    return examples


def _load_hub(task: str, spec: str, role: str) -> list:
    from mlminilm.io import hub

    name, _, split = spec.partition(":")
    local = "an XNLI/MultiNLI TSV or JSON lines file" if task == "xnli" else "a SQuAD v1.1 JSON file"
    datasets = hub.import_datasets()
    if datasets is None:
        raise DataError(
            f"cannot load --{role} hf:{spec} from the Hugging Face Hub: {hub.MISSING_DATASETS}; "
            f"{hub.HUB_EXTRA}, or pass {local} instead"
        )
    try:
        if task == "xnli":
            bare = name.split("/")[-1]
            split = split or (
                "train" if role == "train" else "validation_matched" if bare == "multi_nli" else "validation"
            )
            rows = (
                datasets.load_dataset(name, "en", split=split)
                if bare == "xnli"
                else datasets.load_dataset(name, split=split)
            )
            names = rows.features["label"].names
            return [
                NLIExample(r["premise"], r["hypothesis"], label_id(names[r["label"]]), "en")
                for r in rows
                if r["label"] >= 0
            ]
        from mlminilm.tasks.squad import QAExample

        rows = datasets.load_dataset(name, split=split or ("train" if role == "train" else "validation"))
        return [
            QAExample(
                r["id"],
                r["question"],
                r["context"],
                [{"text": t, "answer_start": s} for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"])],
                r.get("title"),
            )
            for r in rows
        ]
    except MlminilmError:
        raise
    except Exception as exc:  # offline, unknown dataset or split: all end the same way for the user
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(
            f"cannot load --{role} hf:{spec} from the Hugging Face Hub: {reason} ({hub.unreachable_hint()}); "
            f"pass {local} instead"
        ) from None
