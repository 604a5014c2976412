"""Entry point of swarmnode/lab/sapo_experiment.py (--help says what the command does)."""

from swarmnode.lab.sapo_experiment import main

if __name__ == "__main__":
    main()
