"""`python -m durable_obj.cli`: the same as the `durable-obj` command."""

from durable_obj.cli import main

if __name__ == "__main__":
    main()
