"""Entry point of swarmnode/lab/sapo_interim.py (--help says what the command does)."""

from swarmnode.lab.sapo_interim import main

if __name__ == "__main__":
    main()
