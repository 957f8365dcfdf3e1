"""The ``serve`` command: the web dashboard and REST API of a project, on the loopback interface by default."""

from __future__ import annotations

from typing import Annotated

import typer

from stepline.interfaces.cli._options import ConfigOption, Directory, ProjectRoot, app, where

#: Where a generated token is kept (0600), relative to the project root, for scripts: `curl -H "Authorization:
#: Bearer $(cat .stepline/serve-token)"`.
TOKEN_FILE = ".stepline/serve-token"


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on (another than the loopback one "
                                      "exposes your runs to the network: use it behind TLS).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port (0: any free one).")] = 8765,
    token: Annotated[str | None, typer.Option("--token", envvar="STEPLINE_SERVE_TOKEN",
                                              help="The token every request must carry (default: a new random "
                                                   "one, printed once and stored in .stepline/serve-token, "
                                                   "0600).")] = None,
    directory: Directory = None,
    project_root: ProjectRoot = None,
    config: ConfigOption = None,
) -> None:
    """Serve a dashboard of the project's runs (live timeline, artifacts, evidence, gates to approve) and a
    REST API; every request needs the token."""
    import ipaddress
    import socket

    import uvicorn

    from stepline.engine import load_runtime_config
    from stepline.errors import UsageError
    from stepline.interfaces.cli._render import err_console
    from stepline.interfaces.web import LOOPBACK_HOSTS, HeaderTimeoutH11, create_app, new_token, write_token_file
    from stepline.store import state_folder

    at = where(directory, project_root)
    runtime = load_runtime_config(at.root, at.option(config))
    if token is not None and len(token) < 16:
        raise UsageError("--token must be at least 16 characters", hint="or leave it out for a random one")
    stored = None
    if token is None:
        token = new_token()
        stored = at.root / TOKEN_FILE
        state_folder(stored.parent)  # git-ignored before the token is in it
        write_token_file(stored, token)
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    server: uvicorn.Server | None = None  # the app's live streams end once it is told to stop
    application = create_app(at.root, runtime, token, allowed_hosts=LOOPBACK_HOSTS if loopback else None,
                             stopping=lambda: server is not None and server.should_exit)
    server = uvicorn.Server(uvicorn.Config(application, log_level="warning", timeout_graceful_shutdown=2,
                                           lifespan="on", http=HeaderTimeoutH11))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                         hint="pick another --port (0 takes any free one)") from None
    listener.listen(128)  # the address printed below takes connections at once (they wait for the server)
    bound = listener.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    err_console.print(f"stepline dashboard for {at.root}: http://{shown}:{bound}/", markup=False, soft_wrap=True)
    if stored is not None:
        # The one time the token is shown; it is in the 0600 file for scripts.
        err_console.print(f"token: {token}   (also in {stored}, readable by you only)", markup=False,
                          soft_wrap=True)
    if not loopback:
        err_console.print(f"warning: listening on {host}, not the loopback interface: anyone who can reach it "
                          "and has the token sees and decides your runs; put TLS in front", markup=False)
    server.run(sockets=[listener])
