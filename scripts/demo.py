"""Entry point of swarmnode/lab/demo.py (--help says what the command does)."""

from swarmnode.lab.demo import main

if __name__ == "__main__":
    main()
