"""Per-language evaluation: XNLI accuracy (`xnli.run`) and MLQA / XQuAD / TyDiQA-GoldP EM and F1 (`mlqa.run`)."""
