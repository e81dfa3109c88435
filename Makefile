# Two commands on a fresh machine:  `make app`  (the coding app on the embedded demo data)
#                                   `make test` (the whole test suite)
PY ?= python3
PORT ?= 8501
STAMP := .installed

$(STAMP): pyproject.toml
	# the local CPU wheel first, so no newer CUDA build of torch is pulled
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"
	# headless Chromium and a Chinese font for the browser tests, the PostgreSQL server the database tests start in a
	# temporary folder (Debian packages; the tests never use a running one). A failed install stops make: CI must
	# not pass by skipping the tests that need them.
	command -v chromium >/dev/null 2>&1 || apt-get install -y -q chromium fonts-wqy-zenhei >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null && apt-get install -y -q chromium fonts-wqy-zenhei >/dev/null) \
	  || { echo "make: could not install Debian's chromium (needed by the browser tests)" >&2; exit 1; }
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt-get install -y -q postgresql >/dev/null 2>&1 \
	  || (apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null) \
	  || { echo "make: could not install Debian's postgresql server (needed by the database tests)" >&2; exit 1; }
	touch $(STAMP)

install: $(STAMP)

# the demo runs as a single coder without sign-in; with TERMNORM_AUTH=on (or `termnorm app`) sign-in and roles
# apply: create the first admin with `termnorm create-admin NAME`
app: $(STAMP)
	TERMNORM_AUTH=$${TERMNORM_AUTH:-off} $(PY) -m streamlit run app.py --server.headless true --server.port $(PORT)

test: $(STAMP)
	$(PY) -m pytest -q

.PHONY: install app test
