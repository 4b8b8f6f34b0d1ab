"""``python -m bench quality|ideas|speed|transfer|client|backends [options]``: the same as running the script."""

import sys

from bench import backends, client, ideas, quality, speed, transfer

COMMANDS = {
    "quality": quality.main, "ideas": ideas.main, "speed": speed.main, "transfer": transfer.main, "client": client.main,
    "backends": backends.main,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m bench {{{','.join(COMMANDS)}}} [options]  (--help for each)", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(COMMANDS[sys.argv[1]](sys.argv[2:]))
