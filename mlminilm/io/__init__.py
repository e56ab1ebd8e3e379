"""Where mlminilm reads from and writes to: files that appear whole (`atomic`), temporaries of dead processes
(`stale`), and the Hugging Face Hub (`hub`: offline hints, the optional `datasets` import)."""
