"""The Team page (admins, when sign-in is on): who may use this workbench, and as what.

The roles and what each allows come from ``workbench.team.access`` (``ROLES``,
``permissions_of``); the page only lists members and calls ``set_role`` / ``remove_member``,
which check that the person acting is an admin.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import feedback
from workbench import settings
from workbench.team import access


def render() -> None:
    feedback.page_header("Team", "Who may sign in to this workbench, and what each of them may do.")
    st.dataframe(
        pd.DataFrame(
            [
                {"role": str(role), "may also": ", ".join(access.permissions_of(role)) or "—"}
                for role in access.ROLES
            ]
        ),
        hide_index=True,
        width="stretch",
        column_config={"may also": st.column_config.TextColumn("besides reading and translating")},
    )
    members = access.list_members()
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "e-mail": m.email,
                    "role": str(m.role),
                    "added by": m.added_by
                    or (f"configuration ({settings.ENV_ADMINS})" if m.configured else ""),
                }
                for m in members
            ],
            columns=["e-mail", "role", "added by"],
        ),
        hide_index=True,
        width="stretch",
        key="team_members",
    )
    with st.form("team_set_role", border=True):
        st.markdown("**Add a member or change a role**")
        cols = st.columns([3, 1], vertical_alignment="bottom")
        email = cols[0].text_input("E-mail", key="team_email", placeholder="name@example.org")
        role = cols[1].selectbox("Role", [str(r) for r in access.ROLES], key="team_role")
        if st.form_submit_button("Save", type="primary", icon=":material/person_add:"):
            with feedback.error_boundary("saving the role"):
                member = access.set_role(email, role)
                feedback.flash(f"{member.email} is now a {member.role}.")
                st.rerun()
    removable = [m.email for m in members if not m.configured]
    if removable:
        cols = st.columns([3, 1], vertical_alignment="bottom")
        who = cols[0].selectbox("Remove a member", removable, key="team_remove_email")
        if cols[1].button("Remove", icon=":material/person_remove:", key="team_remove"):
            with feedback.error_boundary("removing the member"):
                access.remove_member(who)
                feedback.flash(f"{who} was removed from the team.")
                st.rerun()
