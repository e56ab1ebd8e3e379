"""Per-language evaluation: XNLI accuracy (`xnli.run`), MLQA / XQuAD / TyDiQA-GoldP EM and F1 (`mlqa.run`) and
Tatoeba sentence retrieval (`tatoeba.run`, no fine-tuning)."""
