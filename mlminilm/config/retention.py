"""retention: what students keep of their teacher, per task and language, beside the teacher cut to their depth."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlminilm.config.common import PRECISIONS, Config, device_option, quiet_option, unknown_langs
from mlminilm.config.evaluation import OVERWRITE_HELP, PRECISION_HELP
from mlminilm.config.options import COMMA, EACH, option

# The skills `retention` measures, in report order: Tatoeba (tatoeba/ and tatoeba-more/), MLQA dev
# question -> passage retrieval (mlqa/dev/), the frozen-encoder XNLI probe (xnli/), and after English fine-tuning
# XNLI (xnli/) and MLQA (tydiqa/'s English train, mlqa/dev/).
RETENTION_TASKS = ("tatoeba", "retrieval", "probe", "xnli", "mlqa")
RETENTION_DEFAULT_TASKS = ("tatoeba", "retrieval")
CUT_LAYERS_ALONE = 6  # the cut teacher's depth when no student gives one
RESAMPLES = 1000  # bootstrap resamples of each interval
TEACHER_ROW = "teacher"  # the rows the command makes itself (no --student may take their names)
CUT_ROW = "cut teacher"


@dataclass(frozen=True)
class RetentionConfig(Config):
    """`retention`: the teacher, the teacher cut to the students' depth (untrained: the baseline every table keeps)
    and each student, measured by the evaluation commands on every task and language of `data`; per language the
    score, its share of the teacher's, 95 % bootstrap intervals and how many languages each row beats the cut
    teacher in. `students`: NAME=DIR items. `work` None: the stages go to a temporary folder, removed at the end."""

    teacher: str = option(
        "",
        required=True,
        metavar="MODEL",
        group="inputs",
        help="The teacher: an encoder directory, hub id or packaged teacher name.",
    )
    students: tuple[str, ...] = option(
        (),
        flag="--student",
        repeat=EACH,
        metavar="NAME=DIR",
        show_default=False,
        group="inputs",
        help="A student to measure, named as its rows will be (repeat the option for several).",
    )
    tasks: tuple[str, ...] = option(
        RETENTION_DEFAULT_TASKS,
        repeat=COMMA,
        metavar="TASKS",
        show_default=",".join(RETENTION_DEFAULT_TASKS),
        group="method",
        help=f"What to measure, comma-separated: {', '.join(RETENTION_TASKS)}.",
    )
    data: str = option(
        "",
        required=True,
        metavar="DIR",
        group="inputs",
        help="A folder laid out like ../shared/data: tatoeba/ (and tatoeba-more/) for tatoeba, mlqa/dev/ for "
        "retrieval, xnli/ for probe and xnli, tydiqa/ and mlqa/dev/ for mlqa; each task says in one line what it "
        "misses.",
    )
    out: Path | None = option(
        None,
        replay=False,
        group="output",
        help="Write the report here: retention.md, retention.json, retention.html, chart.png (must be empty unless "
        "--overwrite).",
    )
    work: Path | None = option(
        None,
        group="output",
        help="Keep every stage here (the cut teacher, each evaluation): a rerun reads finished stages back and "
        "refuses a stage whose inputs changed. Default: a temporary folder, removed at the end.",
    )
    baseline: bool = option(
        True, group="method", help="Measure the teacher cut to the students' depth, untrained, as a row."
    )
    cut_layers: int | None = option(
        None,
        min=1,
        group="method",
        help=f"Depth of the cut teacher (its first N layers). Default: the students' depth ({CUT_LAYERS_ALONE} "
        "without a student).",
    )
    langs: tuple[str, ...] = option(
        (), repeat=COMMA, group="inputs", help="Only these languages (default: every language each task's data has)."
    )
    xnli_epochs: float = option(
        3.0,
        check="positive",
        group="schedule",
        help="xnli: epochs of `finetune --task xnli` on the English pairs (lr 1e-4, batch 32).",
    )
    qa_epochs: float = option(
        1.0,
        check="positive",
        group="schedule",
        help="mlqa: epochs of `finetune --task qa` on English TyDiQA-GoldP (lr 1e-4, batch 32).",
    )
    resamples: int = option(RESAMPLES, min=1, group="method", help="Bootstrap resamples of each 95 % interval.")
    seed: int = option(0, min=0, group="method", help="Seed of the bootstrap draws.")
    batch_size: int | None = option(
        None,
        min=1,
        group="machine",
        help="Texts per forward pass (default: each evaluation command's own, as eval-tatoeba's).",
    )
    overwrite: bool = option(False, group="output", help=OVERWRITE_HELP, replay=False)
    precision: str = option("auto", choices=PRECISIONS, group="machine", help=PRECISION_HELP)
    device: str = device_option()
    quiet: bool = quiet_option()

    def problems(self) -> list[str]:
        p: list[str] = []
        if not self.teacher:
            p.append("--teacher is required (an encoder directory, hub id or packaged teacher name)")
        if not self.data:
            p.append("--data is required (a folder laid out like ../shared/data)")
        unknown = [t for t in self.tasks if t not in RETENTION_TASKS]
        if unknown:
            p.append(f"--tasks {','.join(unknown)}: choose from {', '.join(RETENTION_TASKS)}")
        elif not self.tasks:
            p.append(f"--tasks is empty: choose from {', '.join(RETENTION_TASKS)}")
        p += student_problems(self.students)
        unknown_langs(p, self.langs, "--langs")
        return p


def student_problems(items: tuple[str, ...]) -> list[str]:
    """What is wrong with the --student items: NAME=DIR each, names distinct and not a reserved row's."""
    p: list[str] = []
    names: list[str] = []
    for item in items:
        name, sep, path = item.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            p.append(f"--student {item!r}: give NAME=DIR (e.g. --student recipe=runs/recipe/student)")
        elif name in (TEACHER_ROW, CUT_ROW):
            p.append(f"--student {item!r}: {name!r} names a row the command makes itself; choose another name")
        elif name in names:
            p.append(f"--student {item!r}: the name {name!r} is given twice")
        names.append(name)
    return p
