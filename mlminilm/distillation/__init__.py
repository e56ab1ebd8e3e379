"""What a distillation step computes, one concept per module:

- `capture`: Q, K, V (and the output) of one encoder layer, computed with the model's own modules;
- `relations`: self-attention relations and their KL divergence (chunked, fp32), MiniLM's building blocks;
- `losses`: MiniLM v1 / MiniLMv2 and the output terms (hidden states, sentence embedding), each a small function;
- `objective`: a distill step's terms from a teacher and a student, and their weighting.
"""
