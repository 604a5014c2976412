"""Entry point of swarmnode/lab/learning_curve.py (--help says what the command does)."""

from swarmnode.lab.learning_curve import main

if __name__ == "__main__":
    main()
