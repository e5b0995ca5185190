"""The Team page (admins, when sign-in is on): who may use this workbench, and as what.

The roles and what each allows come from ``workbench.team.access`` (``ROLES``,
``permissions_of``; each ``Permission``'s value is its label, a message id); the page only
lists members and calls ``set_role`` / ``remove_member``, which check that the person acting
is an admin.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import feedback, pickers
from ui.i18n import N_, _, labels, translate
from ui.signin import role_label
from workbench import settings
from workbench.team import access

# After a role is saved: a whole sentence per role ("an editor", "a viewer").
NOW_A = {
    "viewer": N_("{email} is now a viewer."),
    "editor": N_("{email} is now an editor."),
    "admin": N_("{email} is now an admin."),
}
MEMBER_COLUMNS = (N_("e-mail"), N_("role"), N_("added by"))  # message ids, shown translated


def render() -> None:
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "role": role_label(role),
                    "may": _(", ").join(translate(p) for p in access.permissions_of(role)),
                }
                for role in access.ROLES
            ]
        ),
        hide_index=True,
        width="stretch",
        column_config={
            "role": st.column_config.TextColumn(_("role")),
            "may": st.column_config.TextColumn(_("may")),
        },
    )
    members = access.list_members()
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "e-mail": m.email,
                    "role": role_label(m.role),
                    "added by": m.added_by
                    or (
                        _("configuration ({variable})", variable=settings.ENV_ADMINS)
                        if m.configured
                        else ""
                    ),
                }
                for m in members
            ],
            columns=list(MEMBER_COLUMNS),
        ),
        hide_index=True,
        width="stretch",
        column_config=labels(MEMBER_COLUMNS),
        key="team_members",
    )
    with st.form("team_set_role", border=True):
        st.markdown("**" + _("Add a member or change a role") + "**")
        cols = st.columns([3, 1], vertical_alignment="bottom")
        email = cols[0].text_input(_("E-mail"), key="team_email", placeholder="name@example.org")
        role = pickers.role_picker(cols[1], key="team_role")
        if st.form_submit_button(_("Save"), type="primary", icon=":material/person_add:"):
            with feedback.error_boundary(N_("saving the role")):
                member = access.set_role(email, role)
                feedback.flash(translate(NOW_A[member.role], {"email": member.email}))
                st.rerun()
    removable = [m.email for m in members if not m.configured]
    if removable:
        cols = st.columns([3, 1], vertical_alignment="bottom")
        who = cols[0].selectbox(_("Remove a member"), removable, key="team_remove_email")
        if cols[1].button(_("Remove"), icon=":material/person_remove:", key="team_remove"):
            with feedback.error_boundary(N_("removing the member")):
                access.remove_member(who)
                feedback.flash(_("{email} was removed from the team.", email=who))
                st.rerun()
