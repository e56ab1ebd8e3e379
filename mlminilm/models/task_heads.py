"""An encoder with a fine-tuning task's head: XNLI's 3-label sequence classification, QA's span extraction.

A model without the head (a distilled student, XLM-R, mBERT...) gets a fresh one; an NLI head whose labels are the
NLI classes is kept as it is.
"""

from __future__ import annotations

import torch
from torch import nn

from mlminilm.errors import DataError, MlminilmError
from mlminilm.models.loading import _load_error, load_config, load_model
from mlminilm.tasks.xnli import NLI_LABELS, label_id

HEAD_NAMES = {"xnli": "sequence classification (3 NLI labels)", "qa": "span extraction (start/end logits)"}


def load_task_model(task: str, name: str, seed: int) -> nn.Module:
    """The encoder with the task's head; a head that is missing (or of another size) is freshly initialised,
    reproducibly for `seed`."""
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification

    torch.manual_seed(seed)
    try:
        if task == "xnli":
            config = load_config(name)
            kwargs = {}
            if not _has_nli_head(config):
                kwargs = dict(
                    num_labels=len(NLI_LABELS),
                    id2label=dict(enumerate(NLI_LABELS)),
                    label2id={label: i for i, label in enumerate(NLI_LABELS)},
                )
            # Strict (load_model): only the head may be new (and the pooler the files never had).
            return load_model(
                AutoModelForSequenceClassification,
                name,
                what=f"model (with a {HEAD_NAMES[task]} head)",
                new_head=True,
                dtype=torch.float32,
                **kwargs,
            )[0]
        # fp32 weights whatever the checkpoint stores: the run's --precision decides the compute dtype.
        return load_model(
            AutoModelForQuestionAnswering,
            name,
            what=f"model (with a {HEAD_NAMES[task]} head)",
            new_head=True,
            dtype=torch.float32,
        )[0]
    except MlminilmError:
        raise
    except Exception as exc:
        raise _load_error(f"model (with a {HEAD_NAMES[task]} head)", name, exc) from exc


def _has_nli_head(config) -> bool:
    """A 3-label classification head whose labels are the NLI classes (in whatever order): keep it as is."""
    archs = config.architectures or []
    if not any(a.endswith("ForSequenceClassification") for a in archs) or config.num_labels != len(NLI_LABELS):
        return False
    try:
        return sorted(label_id(str(config.id2label[i])) for i in range(3)) == [0, 1, 2]
    except (DataError, KeyError):
        return False
