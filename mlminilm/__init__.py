"""mlminilm: MiniLM deep self-attention distillation for multilingual encoders."""

__version__ = "0.1.0"
