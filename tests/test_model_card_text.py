"""The model card's results section written directly (mlminilm.models.card_results): line breaks, a BOM, a section
inside the body, a card without front matter, front matter in flow style, merges in place, and time linear in the
card's size."""

from __future__ import annotations

from helpers import by_config, card_results

# ----------------------------------------------------------------------------------------- card text, direct


def xnli_doc(**accuracies) -> dict:
    return {
        "task": "xnli",
        "split": "test",
        "protocol": "zero-shot cross-lingual transfer (XTREME): ...",
        "data": {"source": "x"},
        "languages": {k: {"accuracy": v} for k, v in accuracies.items()},
    }


def test_line_breaks_bom_and_a_section_inside_the_body(tmp_path):
    from huggingface_hub import ModelCard

    from mlminilm.models.card_results import update_card

    card = tmp_path / "m" / "README.md"
    card.parent.mkdir()
    original = "\ufeff---\r\nlicense: mit\r\n---\r\n\r\n# Title\r\n\r\nEnd text.\r\n"
    card.write_bytes(original.encode())
    update_card(card, xnli_doc(de=50.0))
    text = card.read_bytes().decode()
    assert text.startswith("\ufeff---\r\nlicense: mit\r\nmodel-index:\r\n") and "\n" not in text.replace("\r\n", "")
    assert by_config(card_results(card)) == {"de": 50.0}
    # Text written after the section by hand stays where it is when the section is replaced.
    card.write_bytes(text.encode() + b"\r\nA note after the table.\r\n")
    update_card(card, xnli_doc(de=75.0, en=25.0))
    after = card.read_bytes().decode()
    assert after.endswith("<!-- mlminilm:eval-xnli:end -->\r\n\r\nA note after the table.\r\n")
    assert "\r\n\r\n# Title\r\n\r\nEnd text.\r\n\r\n<!-- mlminilm:eval-xnli:start -->" in after
    assert by_config(card_results(card)) == {"de": 75.0, "en": 25.0}
    assert ModelCard.load(card).data.license == "mit"


def test_card_without_front_matter_gets_one_and_keeps_its_text(tmp_path):
    from mlminilm.models.card_results import update_card

    card = tmp_path / "plain" / "README.md"
    card.parent.mkdir()
    original = "# Plain card\n\nNo metadata here."  # no final line break
    card.write_text(original, encoding="utf-8")
    update_card(card, xnli_doc(de=50.0, en=40.0))
    text = card.read_text(encoding="utf-8")
    assert text.startswith("---\nmodel-index:\n- name: plain\n")
    assert text.split("\n---\n", 1)[1].startswith(original + "\n\n<!-- mlminilm:eval-xnli:start -->")
    assert (
        by_config(card_results(card)) == {"de": 50.0, "en": 40.0} and "| XNLI | test | average of 2 | 45.00 |" in text
    )


def test_front_matter_in_flow_style_is_dumped_again_with_the_same_fields(tmp_path):
    import yaml

    from mlminilm.models.card_results import update_card

    card = tmp_path / "m" / "README.md"
    card.parent.mkdir()
    card.write_text("---\n{license: mit, tags: [a, b], base_model: x/y}\n---\nBody.\n", encoding="utf-8")
    update_card(card, xnli_doc(de=50.0))
    text = card.read_text(encoding="utf-8")
    fields = yaml.safe_load(text.split("---\n")[1])
    assert {k: v for k, v in fields.items() if k != "model-index"} == {
        "license": "mit",
        "tags": ["a", "b"],
        "base_model": "x/y",
    }
    assert text.split("\n---\n", 1)[1].startswith("Body.\n\n<!-- mlminilm:eval-xnli:start -->")
    assert by_config(card_results(card)) == {"de": 50.0}


def test_merge_replaces_in_place():
    from huggingface_hub import EvalResult

    from mlminilm.models.card_results import merge

    def result(dataset: str, config: str, value: float):
        return EvalResult(
            task_type="t",
            dataset_type=dataset,
            dataset_name=dataset,
            dataset_config=config,
            dataset_split="test",
            metric_type="accuracy",
            metric_value=value,
        )

    old = [result("a", "de", 1), result("x", "de", 2), result("x", "en", 3), result("b", "de", 4)]
    merged = merge(old, [result("x", "en", 30), result("x", "fr", 40)])
    assert [(r.dataset_type, r.dataset_config, r.metric_value) for r in merged] == [
        ("a", "de", 1),
        ("x", "de", 2),
        ("x", "en", 30),
        ("x", "fr", 40),
        ("b", "de", 4),
    ]


def test_a_card_of_many_tags_is_updated_in_time_linear_in_its_size(tmp_path, monkeypatch):
    """Issue 27: 300,000 tags took > 400 s: huggingface_hub's ModelCardData dedups `tags` in quadratic time, and
    the old code parsed the YAML 8 or more times. Counted, not timed (a clock fails on a starved machine): the
    update parses the front matter at most 3 times and never hands the tags to ModelCardData."""
    import huggingface_hub
    import yaml

    from mlminilm.models.card_results import update_card

    card = tmp_path / "m" / "README.md"
    card.parent.mkdir()
    front = yaml.safe_dump({"license": "mit", "tags": [f"tag{i}" for i in range(2_000)]})
    card.write_text(f"---\n{front}---\n\nBody.\n", encoding="utf-8")
    parses, tag_lists = [], []
    real_load, real_data = yaml.safe_load, huggingface_hub.ModelCardData

    def counted_load(text):
        parses.append(len(text))
        return real_load(text)

    def watched_data(**fields):
        tag_lists.append(len(fields.get("tags") or ()))
        return real_data(**fields)

    monkeypatch.setattr(yaml, "safe_load", counted_load)
    monkeypatch.setattr(huggingface_hub, "ModelCardData", watched_data)
    update_card(card, xnli_doc(de=50.0))
    assert 1 <= len([n for n in parses if n >= len(front)]) <= 3, parses
    assert tag_lists and not any(tag_lists), tag_lists
    monkeypatch.undo()
    fields = yaml.safe_load(card.read_text(encoding="utf-8").split("---\n")[1])
    assert len(fields["tags"]) == 2_000 and fields["license"] == "mit"
    assert by_config(card_results(card)) == {"de": 50.0}
