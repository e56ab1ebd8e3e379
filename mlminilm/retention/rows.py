"""The rows of a retention table: the teacher, the teacher cut to the students' depth (untrained, built here as
`distill --init teacher --init-layers first --max-steps 0` starts a student) and each named student."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.retention import CUT_LAYERS_ALONE, CUT_ROW, TEACHER_ROW, RetentionConfig
from mlminilm.errors import ConfigError, MlminilmError

# The row kinds, in table order
TEACHER, BASELINE, STUDENT = "teacher", "baseline", "student"


@dataclass(frozen=True)
class Row:
    """One model of the table: its name, what it is and where it is (a directory, hub id or packaged name)."""

    name: str
    kind: str
    model: str
    layers: int

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "model": self.model, "layers": self.layers}


def parse_students(items: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, directory) of each NAME=DIR item (the config has checked their form)."""
    pairs = []
    for item in items:
        name, _, path = item.partition("=")
        pairs.append((name.strip(), path.strip()))
    return pairs


def plan_rows(cfg: RetentionConfig) -> tuple[list[Row], int | None]:
    """The teacher and student rows (every model's config read, all problems at once) and the cut teacher's depth
    (None without --baseline). The cut row itself is added once it is built (`cut_row`)."""
    from mlminilm.models.loading import check_encoder_config, load_config

    problems: list[str] = []
    rows: list[Row] = []
    for name, kind, model in [(TEACHER_ROW, TEACHER, cfg.teacher)] + [
        (n, STUDENT, d) for n, d in parse_students(cfg.students)
    ]:
        flag = "--teacher" if kind == TEACHER else f"--student {name}"
        try:
            config = load_config(model)
            check_encoder_config(config, model)
            rows.append(Row(name, kind, model, int(config.num_hidden_layers)))
        except MlminilmError as exc:
            problems.append(f"{flag}: {exc}")
        except OSError as exc:
            problems.append(f"{flag} {model}: not a model directory or hub id ({exc})")
    if problems:
        raise ConfigError("; ".join(problems))
    return rows, cut_depth(cfg, rows)


def cut_depth(cfg: RetentionConfig, rows: list[Row]) -> int | None:
    """--cut-layers, else the students' one depth, else CUT_LAYERS_ALONE; None without --baseline."""
    if not cfg.baseline:
        return None
    teacher = rows[0]
    depth = cfg.cut_layers
    if depth is None:
        depths = sorted({r.layers for r in rows if r.kind == STUDENT})
        if len(depths) > 1:
            raise ConfigError(
                f"the students have {' and '.join(map(str, depths))} layers: give the cut teacher's depth with "
                "--cut-layers N (or --no-baseline)"
            )
        depth = depths[0] if depths else CUT_LAYERS_ALONE
    if depth > teacher.layers:
        raise ConfigError(
            f"the cut teacher would have {depth} layers, more than the teacher's {teacher.layers}: give --cut-layers "
            f"{teacher.layers} or less"
        )
    return depth


def build_cut_teacher(teacher: str, layers: int, out: Path) -> dict:
    """The teacher's embeddings and first `layers` layers in a student of the teacher's widths, untrained, exported
    as distill exports a student (with the teacher's tokenizer and sentence-transformers files) into `out`."""
    from mlminilm.config import StudentShape
    from mlminilm.models.export import export_model
    from mlminilm.models.loading import load_config, load_tokenizer, resolve_model
    from mlminilm.models.student import build_student, init_from_teacher, student_config

    t_config = load_config(teacher)
    shape = StudentShape(
        layers=layers,
        hidden=t_config.hidden_size,
        heads=t_config.num_attention_heads,
        intermediate=t_config.intermediate_size,
    )
    student = build_student(student_config(t_config, shape), seed=0)
    picked = init_from_teacher(student, teacher, "first")
    card = {"teacher": teacher, "init": "teacher", "init_layers": "first", "layers": picked, "steps": 0}
    export_model(
        student.eval(),
        load_tokenizer(teacher),
        out,
        card,
        summary=f"The teacher cut to its first {layers} layers, untrained (the baseline of `mlminilm retention`).",
        sentence_teacher=resolve_model(teacher),
    )
    return {"model": str(out), "layers": layers, "teacher_layers": picked}


def cut_row(model: str, layers: int) -> Row:
    return Row(CUT_ROW, BASELINE, model, layers)
