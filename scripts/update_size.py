"""Entry point of swarmnode/lab/update_size.py (--help says what the command does)."""

from swarmnode.lab.update_size import main

if __name__ == "__main__":
    main()
