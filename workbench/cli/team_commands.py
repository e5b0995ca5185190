"""``users``, ``user-role`` and ``user-remove``: the team's members and their roles (the work
is ``workbench.team.access``; the command line acts as the local admin, so it may set up a
team before sign-in is turned on)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from db.tables import Role
from workbench.cli.common import (
    EXIT_OK,
    Command,
    json_option,
    print_done,
    print_json,
    print_list,
    print_text,
)

if TYPE_CHECKING:
    from workbench.team.access import Member


def _member_record(m: Member) -> dict[str, object]:
    return {
        "email": m.email,
        "role": str(m.role),
        "configured": m.configured,
        "added_by": m.added_by,
    }


def _cmd_users(args: argparse.Namespace) -> int:
    from workbench.team.access import list_members

    members = list_members()
    return print_list(
        args.json,
        [_member_record(m) for m in members],
        map(_member_line, members),
        "no members: add one with `python -m workbench user-role EMAIL ROLE`",
    )


def _member_line(m: Member) -> str:
    origin = "configured" if m.configured else f"added by {m.added_by or '—'}"
    return f"{m.email}  {m.role}  {origin}"


def _args_user_role(p: argparse.ArgumentParser) -> None:
    p.add_argument("email", help="the e-mail the sign-in provider reports")
    p.add_argument("role", choices=[r.value for r in Role], help="what they may do")
    json_option("the member as one JSON object")(p)


def _cmd_user_role(args: argparse.Namespace) -> int:
    from workbench.team.access import set_role

    member = set_role(args.email, args.role)
    if args.json:
        print_json(_member_record(member))
    else:
        print_text(_member_line(member))
    return EXIT_OK


def _args_user_remove(p: argparse.ArgumentParser) -> None:
    p.add_argument("email", help="the member to remove")


def _cmd_user_remove(args: argparse.Namespace) -> int:
    from workbench.team.access import remove_member

    remove_member(args.email)
    return print_done(f"removed {args.email} from the team")


COMMANDS = [
    Command(
        "users",
        "list the team's members and their roles",
        json_option("one JSON array"),
        _cmd_users,
    ),
    Command(
        "user-role",
        "add a member by e-mail, or change their role (viewer, editor, admin)",
        _args_user_role,
        _cmd_user_role,
    ),
    Command("user-remove", "remove a member from the team", _args_user_remove, _cmd_user_remove),
]
