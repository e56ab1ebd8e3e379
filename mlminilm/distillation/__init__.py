"""What a distillation step computes, one concept per module:

- `capture`: Q, K, V (and the output) of one encoder layer, computed with the model's own modules;
- `relations`: self-attention relations and their KL divergence (chunked, fp32), MiniLM's building blocks;
- `losses`: MiniLM v1 / MiniLMv2 and the output terms (hidden states, sentence embedding), each a small function;
- `terms`: the loss terms as one table (name, weight option, what each reads, how it is computed and logged);
- `objective`: a distill step's terms from a teacher and a student, and their weighting;
- `plan`: a `distill` run's options and teacher facts resolved once (`DistillPlan`);
- `batch`: the run's micro-batch, given or found by trying real steps (`--batch-size auto`);
- `inputs`: what a run reads, one module per kind (the running text, the pairs, ...), each owning its files, record,
  targets, draw and batches;
- `step`: one micro-batch of each input through the terms, and each input's language mix;
- `run`: the run of a plan: load, train, export.
"""
