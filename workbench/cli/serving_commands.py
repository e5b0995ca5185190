"""``serve``, ``serve-version``, ``served`` and the ``api-key-…`` commands: the HTTP API."""

from __future__ import annotations

import argparse

from db.tables import Role
from workbench.cli.common import (
    EXIT_OK,
    Command,
    json_option,
    positive_float,
    positive_int,
    print_done,
    print_json,
    print_list,
    row_id,
)
from workbench.models.engines import ENGINES


def _args_serve(p: argparse.ArgumentParser) -> None:
    from workbench.serving.config import DEFAULT_HOST, DEFAULT_PORT

    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on ({DEFAULT_HOST})")
    p.add_argument("--port", type=positive_int, default=DEFAULT_PORT, help="port (5000)")
    p.add_argument("--workers", type=positive_int, default=1, help="server processes (1)")
    p.add_argument(
        "--require-keys",
        action="store_true",
        help="translations, /v1/versions and /metrics need an API key (?api_key= on a GET); "
        "/health and LibreTranslate's /languages and /frontend/settings stay public, as "
        "LibreTranslate's do",
    )
    p.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="serve without --require-keys on an address other machines reach (refused "
        "otherwise: anyone on the network could translate and read /v1/versions and /metrics)",
    )
    p.add_argument(
        "--requests-per-minute",
        type=positive_int,
        help="per client (key or address) unless its key has its own limit (default: none)",
    )
    p.add_argument(
        "--chars-per-request", type=positive_int, default=5_000, help="characters (5000)"
    )
    p.add_argument("--beam", type=positive_int, default=1, help="beam of /translate (1)")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default=ENGINES[0],
        help=f"decoder of /translate ({ENGINES[0]}); /v1 requests choose their own",
    )
    p.add_argument("--timeout", type=positive_float, default=60.0, help="seconds (60)")
    p.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="torch CPU threads for decoding, in each server process (1)",
    )
    p.add_argument(
        "--no-batching",
        action="store_true",
        help="decode each request on its own (for comparisons)",
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    from workbench.errors import WorkbenchError
    from workbench.messages import N_
    from workbench.serving.config import ServeConfig
    from workbench.serving.entry import refuse_anonymous_network, run_server

    try:
        config = ServeConfig(
            require_keys=args.require_keys,
            requests_per_minute=args.requests_per_minute,
            chars_per_request=args.chars_per_request,
            timeout_s=args.timeout,
            beam=args.beam,
            engine=args.engine,
            threads=args.threads,
            batching=not args.no_batching,
        )
    except ValueError as exc:
        raise WorkbenchError(N_("invalid server settings: {reason}"), reason=exc) from None
    if args.port > 65535:
        raise WorkbenchError(N_("--port must be at most 65535, got {port}"), port=args.port)
    refuse_anonymous_network(args.host, config, args.allow_anonymous)
    run_server(args.host, args.port, args.workers, config)
    return EXIT_OK


def _args_serve_version(p: argparse.ArgumentParser) -> None:
    p.add_argument("version", type=row_id, help="the version that answers for its language pair")
    p.add_argument("--stop", action="store_true", help="stop serving it instead")


def _cmd_serve_version(args: argparse.Namespace) -> int:
    from workbench.models.registry import get_version
    from workbench.serving.served import serve_version, stop_serving

    info = get_version(args.version)
    pair = f"{info.src_lang}→{info.tgt_lang}"
    if args.stop:
        stop_serving(info.id)
        return print_done(f"version {info.id} no longer answers for {pair}: nothing does")
    previous = serve_version(info.id)
    instead = f" (instead of version {previous})" if previous else ""
    return print_done(f"version {info.id} “{info.name}” now answers for {pair}{instead}")


def _cmd_served(args: argparse.Namespace) -> int:
    from workbench.serving.served import list_served

    pairs = list_served()
    return print_list(
        args.json,
        [{"source": p.src_lang, "target": p.tgt_lang, "version_id": p.version_id} for p in pairs],
        (f"{p.pair}  version {p.version_id} “{p.version_name}”" for p in pairs),
        "no version is served: choose one with `python -m workbench serve-version ID`",
    )


def _args_key_create(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", required=True, help="who or what the key is for")
    p.add_argument("--requests-per-minute", type=positive_int, help="this key's rate limit")
    p.add_argument("--chars-per-request", type=positive_int, help="this key's size limit")
    p.add_argument(
        "--role",
        choices=[r.value for r in Role],
        default=Role.VIEWER.value,
        help=f"what requests with the key may do (default {Role.VIEWER.value}: read and "
        "translate only)",
    )


def _cmd_key_create(args: argparse.Namespace) -> int:
    from workbench.serving.api_keys import create_key

    new = create_key(args.name, args.requests_per_minute, args.chars_per_request, args.role)
    print_json(
        {"id": new.info.id, "name": new.info.name, "role": new.info.role, "api_key": new.key}
    )
    return EXIT_OK


def _cmd_keys(args: argparse.Namespace) -> int:
    from workbench.serving.api_keys import list_keys

    keys = list_keys()
    records = [
        {
            "id": k.id,
            "name": k.name,
            "key": k.shown,
            "requests_per_minute": k.requests_per_minute,
            "chars_per_request": k.chars_per_request,
            "role": k.role.value,
            "created_at": k.created_at.isoformat(),
            "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
        }
        for k in keys
    ]
    return print_list(
        args.json,
        records,
        (
            f"{k.id}  {k.shown}  {'active' if k.active else 'revoked'}  {k.role}  "
            f"{_limit(k.requests_per_minute, 'requests/min')}, "
            f"{_limit(k.chars_per_request, 'characters/request')}  {k.name}"
            for k in keys
        ),
        "no API keys: create one with `python -m workbench api-key-create --name NAME`",
    )


def _limit(value: int | None, unit: str) -> str:
    """A key's own limit, or the server's (``serve``'s options decide it, not the key)."""
    return f"{value:,} {unit}" if value is not None else f"server default {unit}"


def _args_key_revoke(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", type=row_id, help="the key's id (see `api-keys`)")


def _cmd_key_revoke(args: argparse.Namespace) -> int:
    from workbench.serving.api_keys import revoke_key

    revoke_key(args.key)
    return print_done(f"revoked API key {args.key}")


COMMANDS = [
    Command("serve", "serve translations over HTTP", _args_serve, _cmd_serve),
    Command(
        "serve-version",
        "make a version answer for its language pair",
        _args_serve_version,
        _cmd_serve_version,
    ),
    Command("served", "list the served versions", json_option("one JSON array"), _cmd_served),
    Command("api-key-create", "create an API key (shown once)", _args_key_create, _cmd_key_create),
    Command(
        "api-keys",
        "list the API keys (never the keys themselves)",
        json_option("one JSON array"),
        _cmd_keys,
    ),
    Command("api-key-revoke", "revoke an API key", _args_key_revoke, _cmd_key_revoke),
]
