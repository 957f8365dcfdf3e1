"""``python -m stepline.interfaces.cli``: the same as the ``stepline`` script."""

from stepline.interfaces.cli import main

main()
