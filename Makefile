# Two commands on a fresh machine:  `make app`  (the coding app on the embedded demo data)
#                                   `make test` (the whole test suite)
PY ?= python3
STAMP := .installed

$(STAMP): pyproject.toml
	# the local CPU wheel first, so no newer CUDA build of torch is pulled
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"
	# headless Chromium for the browser tests (Debian); optional elsewhere
	command -v chromium >/dev/null 2>&1 || (apt-get install -y -q chromium chromium-driver fonts-wqy-zenhei >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver fonts-wqy-zenhei >/dev/null 2>&1)) || echo "chromium not installed: browser tests will be skipped"
	# the PostgreSQL server the database tests start in a temporary folder (Debian; they never use a running one)
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get install -y -q postgresql >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q postgresql >/dev/null 2>&1)) || echo "postgresql not installed: PostgreSQL tests will be skipped"
	touch $(STAMP)

install: $(STAMP)

# the demo runs as a single coder without sign-in; with TERMNORM_AUTH=on (or `termnorm app`) sign-in and roles
# apply: create the first admin with `termnorm create-admin NAME`
app: $(STAMP)
	TERMNORM_AUTH=$${TERMNORM_AUTH:-off} $(PY) -m streamlit run app.py --server.headless true

test: $(STAMP)
	$(PY) -m pytest -q

.PHONY: install app test
