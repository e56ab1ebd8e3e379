"""`python -m mlminilm ...` (and `torchrun -m mlminilm ...`) run the CLI."""

from mlminilm.commands.app import main

if __name__ == "__main__":
    main()
