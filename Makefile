# Quick start: `make run` (the app) and `make test` (the suite). Both create/reuse .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed

.PHONY: run test lint i18n

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m streamlit run streamlit_app.py

# The suite in parallel, one pytest-xdist worker per core (tests/conftest.py gives each worker,
# and every process its tests start, its share of the cores for torch's threads; the tests of a
# module that share a module-scoped fixture stay on one worker); the 15 slowest tests at the end.
test: $(STAMP)
	$(PY) -m pytest -n auto --dist loadgroup --durations=15

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# The catalogs (ui.i18n): extract the messages of the code, merge them into each language's
# .po (translate the new ones there), compile the .mo files the app reads.
i18n: $(STAMP)
	$(VENV)/bin/pybabel extract -F babel.cfg -k _ -k n_:1,2 -k p_:1c,2 -k N_ --add-comments=Translators: --no-location --sort-output \
		--project=workbench --copyright-holder="the workbench authors" --width=100 -o locale/messages.pot .
	$(VENV)/bin/pybabel update -i locale/messages.pot -d locale --no-fuzzy-matching --ignore-obsolete --width=100
	$(VENV)/bin/pybabel compile -d locale --statistics
