"""The Models page's "Add a public model": upload a zipped Marian / OPUS-MT model (as Hugging
Face saves it) or a model folder of ours, and it becomes a version like any trained here
(``workbench.models.model_import.import_zip_upload``). Larger models go through the command
line, which has no upload limit."""

from __future__ import annotations

import streamlit as st

from ui import feedback
from ui.i18n import N_, _
from ui.signin import can
from workbench.models import model_import
from workbench.team.access import Permission

OPUS_MT = "https://huggingface.co/Helsinki-NLP"


def render() -> None:
    if not can(Permission.TRAIN):
        return
    limit = st.get_option("server.maxUploadSize")
    with st.expander(_("Add a public model"), icon=":material/add_circle:"):
        st.markdown(
            _(
                "Start from a general model instead of training from scratch: the OPUS-MT "
                "project publishes over a thousand Marian translation models, licensed CC-BY "
                "4.0, at [{site}]({site}) (e.g. `opus-mt-zh-en`). Download one "
                "(`git clone {site}/opus-mt-zh-en`), zip its folder and upload it here, then "
                "fine-tune it on your pairs with “Continue from” on the Train page.",
                site=OPUS_MT,
            )
        )
        st.caption(
            _(
                "Uploads are limited to {limit} MB; a full OPUS-MT model is about 300 MB: "
                "add it with `python -m workbench register FOLDER` (no limit).",
                limit=limit,
            )
        )
        upload = st.file_uploader(_("Model (zip)"), type=["zip"], key="public_model_zip")
        cols = st.columns(2)
        src_lang = cols[0].text_input(
            _("Source language"), key="public_model_src", placeholder=_("from the model")
        )
        tgt_lang = cols[1].text_input(
            _("Target language"), key="public_model_tgt", placeholder=_("from the model")
        )
        cols = st.columns(2)
        target_token = cols[0].text_input(
            _("Target-language token"),
            key="public_model_token",
            placeholder=">>cmn_Hans<<",
            help=_(
                "Only for a model that translates into several languages: its token for the "
                "one you want (an error lists them)."
            ),
        )
        name = cols[1].text_input(
            _("Version name"), key="public_model_name", placeholder=_("automatic")
        )
        if st.button(
            _("Add the model"),
            icon=":material/upload:",
            disabled=upload is None,
            key="public_model_add",
        ):
            with (
                feedback.error_boundary(N_("adding the model")),
                st.spinner(_("Checking and converting the model…")),
            ):
                version_id = model_import.import_zip_upload(
                    upload.getvalue(),
                    upload.name,
                    src_lang=src_lang.strip() or None,
                    tgt_lang=tgt_lang.strip() or None,
                    name=name.strip() or None,
                    target_token=target_token.strip() or None,
                )
                feedback.flash(
                    _(
                        "Added version #{id}: translate with it, or continue it on the Train page.",
                        id=version_id,
                    )
                )
                st.rerun()
