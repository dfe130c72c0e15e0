# delayq - build, test, demo.
#
#   make              library (static + shared), CLI, examples, unit tests
#   make demo         the seed-000 annotation demo on a private redis-server
#   make test         the whole suite (unit + integration) on a private redis-server
#   make test-fast    the fast tier: C binaries and the quick CLI tests (tests/README.md)
#   make test-asan    the suite built with AddressSanitizer + UBSan
#   make valgrind     the suite's C programs, and each CLI command once (tests/cli/ops/leaks.py),
#                     under valgrind (leaks are errors)
#   make bench        speed, lateness, memory and Redis cost next to references
#   make fuzz         libFuzzer targets (fuzz/fuzz_*.c), FUZZ_SECONDS each (60)
#   make deps         apt-get install whatever is missing (needs root);
#                     make deps-test adds what only the tests use (a browser)
#   make install      PREFIX=/usr/local DESTDIR= (the .pc is written there, for PREFIX)
#   make uninstall    the same PREFIX and DESTDIR: removes what install put
#                     (both refuse a PREFIX or DESTDIR with a space or quote)
#   make format       clang-format -i over the C sources (.clang-format)
#   make format-check fails if a C source is not as make format leaves it
#
# Knobs: CFLAGS/LDFLAGS are yours and are appended, never replaced.
# SANITIZE=address,undefined builds into build-san/. DEBUG=1: -O0.
# WERROR=1: warnings are errors (the project's own builds: make test,
# test-asan, .ci/run); off by default, so a newer compiler's new warning
# never breaks a user's build.
# Each object's header and generated-header dependencies are tracked
# (-MMD -MP, BUILD/**/*.d): an edit rebuilds only what includes it.

PREFIX ?= /usr/local
DESTDIR ?=
CC ?= cc
SANITIZE ?=
DEBUG ?=
WERROR ?=
# The version, from its one place (include/delayq.h); the soname carries
# its major number.
VERSION := $(shell sed -n 's/^\#define DQ_VERSION "\(.*\)"/\1/p' include/delayq.h)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))

ifneq ($(SANITIZE),)
BUILD ?= build-san
SAN_FLAGS = -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
else
BUILD ?= build
SAN_FLAGS =
endif

ifneq ($(DEBUG),)
OPT = -O0 -g3
else
OPT = -O2 -g
endif

WARN = -Wall -Wextra -Wstrict-prototypes -Wwrite-strings -Wmissing-prototypes \
       -Wshadow -Wpointer-arith -Wformat=2 -Wvla
ifneq ($(WERROR),)
WARN += -Werror
endif
DQ_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) $(SAN_FLAGS) -fPIC -fvisibility=hidden \
            -MMD -MP -Iinclude -Isrc $(LAYER_INC) -I$(BUILD)/gen $(CFLAGS)
DQ_LDFLAGS = $(SAN_FLAGS) $(LDFLAGS)
LIBS = -lhiredis -lev -lsodium -lssl -lcrypto -lm
# The CLI writes its JSON with jansson and serves HTTP with libmicrohttpd;
# the library uses neither.
CLI_LIBS = -ljansson -lmicrohttpd

# The scripts' shared code, joined in name order before each script.
LUA_LIB = $(sort $(wildcard lua/lib/*.lua))
LUA_SCRIPTS = $(wildcard lua/*.lua)
# The library's folders, one a layer, lowest first (docs/source-layout.md).
LAYERS = util conn route ops
LAYER_INC = $(LAYERS:%=-Isrc/%)
LIB_SRC = $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.c))
CLI_SRC = $(wildcard src/cli/*.c src/cli/serve/*.c)
UNIT_SRC = $(wildcard tests/unit/*.c)
ITEST_SRC = $(wildcard tests/integration/*.c)
EX_SRC = $(wildcard examples/*.c)
BENCH_SRC = $(wildcard bench/*.c)
DQBENCH_SRC = $(wildcard bench/dqbench/*.c)
# Helpers the tests run (tests/cli/*.py), not tests themselves: run.sh
# executes every tests/unit binary, so they live apart.
TOOL_SRC = $(wildcard tests/tools/*.c)
# LD_PRELOAD shims the tests put under redis-server (a shifted clock):
# shared objects, built without the sanitizers (the server has none).
PRELOAD_SRC = $(wildcard tests/tools/preload/*.c)

LIB_OBJ = $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ = $(CLI_SRC:%.c=$(BUILD)/%.o)
UNIT_BIN = $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
ITEST_BIN = $(ITEST_SRC:tests/integration/%.c=$(BUILD)/tests/%)
EX_BIN = $(EX_SRC:examples/%.c=$(BUILD)/examples/%)
BENCH_BIN = $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%) $(BUILD)/bench/dqbench
TOOL_BIN = $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tests/tools/%)
PRELOAD_SO = $(PRELOAD_SRC:tests/tools/preload/%.c=$(BUILD)/tests/tools/%.so)

STATIC = $(BUILD)/libdelayq.a
SHARED = $(BUILD)/libdelayq.so
CLI = $(BUILD)/delayq

# Debian 12 packages the build, the tests and the demo need.
DEB_PKGS = build-essential pkg-config libhiredis-dev libev-dev libsodium-dev libjansson-dev \
           libmicrohttpd-dev libcmocka-dev redis-server redis-tools python3 valgrind \
           python3-prometheus-client libssl-dev openssl tzdata python3-redis
# What only the tests need besides: a browser for the dashboard's test.
# clang-format-16: tests/cli/ops/format.py runs make format-check with it.
TEST_PKGS = chromium chromium-driver python3-selenium clang-format-16

.PHONY: all deps deps-test demo test test-asan valgrind bench fuzz fuzz-objs check install uninstall \
        format format-check clean
all: $(STATIC) $(SHARED) $(CLI) $(UNIT_BIN) $(ITEST_BIN) $(TOOL_BIN) $(PRELOAD_SO) $(EX_BIN) $(BENCH_BIN)

deps:
	@sh tools/deps.sh $(DEB_PKGS)

deps-test: deps
	@sh tools/deps.sh $(TEST_PKGS)

$(BUILD)/gen/scripts.h: tools/embed-lua.sh tools/lua-trim.awk $(LUA_LIB) $(LUA_SCRIPTS)
	@mkdir -p $(dir $@)
	sh tools/embed-lua.sh $@ lua/lib $(LUA_SCRIPTS)

$(BUILD)/gen/dashboard.h: tools/embed-file.sh src/cli/serve/dashboard.html
	@mkdir -p $(dir $@)
	sh tools/embed-file.sh $@ dq_dashboard_html src/cli/serve/dashboard.html

# The generated headers exist before anything compiles (order-only); after
# that the .d files say who includes them (script.c, serve_http.c), and only
# those rebuild when a Lua file or the dashboard changes. The Makefile is a
# prerequisite too: an edit of it (flags, folders) rebuilds every object,
# and so does the first build in a directory made before the .d files,
# whose objects would otherwise never see a header change.
$(BUILD)/%.o: %.c Makefile | $(BUILD)/gen/scripts.h $(BUILD)/gen/dashboard.h
	@mkdir -p $(dir $@)
	$(CC) $(DQ_CFLAGS) -c $< -o $@

# Each compile's dependency file (-MMD -MP), wherever the rules put it.
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

$(STATIC): $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libdelayq.so.$(SOMAJOR) $(DQ_LDFLAGS) -o $@ $^ $(LIBS)

$(CLI): $(CLI_OBJ) $(STATIC)
	$(CC) $(DQ_LDFLAGS) -o $@ $(CLI_OBJ) $(STATIC) $(LIBS) $(CLI_LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(STATIC) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(DQ_CFLAGS) -Itests $(DQ_LDFLAGS) -o $@ $< $(STATIC) $(LIBS) -lcmocka

$(BUILD)/tests/%: tests/integration/%.c $(STATIC) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(DQ_CFLAGS) -Itests $(DQ_LDFLAGS) -o $@ $< $(STATIC) $(LIBS) -lcmocka

$(BUILD)/tests/tools/%: tests/tools/%.c $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(DQ_CFLAGS) $(DQ_LDFLAGS) -o $@ $< $(STATIC) $(LIBS)

# A shim runs inside redis-server: no sanitizer (its runtime would have to
# load first), only libc.
$(BUILD)/tests/tools/%.so: tests/tools/preload/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) -fPIC -shared $(CFLAGS) -o $@ $< -ldl

$(BUILD)/examples/%: examples/%.c $(STATIC) $(wildcard examples/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(DQ_CFLAGS) $(DQ_LDFLAGS) -o $@ $< $(STATIC) $(LIBS)

$(BUILD)/bench/%: bench/%.c $(STATIC) $(wildcard bench/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(DQ_CFLAGS) -Ibench $(DQ_LDFLAGS) -o $@ $< $(STATIC) $(LIBS)

# dqbench is one program of many files (bench/dqbench/: a file per figure).
$(BUILD)/bench/dqbench: $(DQBENCH_SRC) $(STATIC) $(wildcard bench/*.h bench/dqbench/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(DQ_CFLAGS) -Ibench -Ibench/dqbench $(DQ_LDFLAGS) -o $@ $(DQBENCH_SRC) $(STATIC) $(LIBS)

demo: deps
	$(MAKE) all
	sh examples/demo.sh $(BUILD)

test: deps-test
	$(MAKE) WERROR=1 all
	sh tests/run.sh $(BUILD)

# The fast tier for a developer (tests/README.md): the unit and integration
# binaries and the CLI tests not marked "# tier: slow".
.PHONY: test-fast
test-fast: deps-test
	$(MAKE) all
	DQ_TEST_TIER=fast sh tests/run.sh $(BUILD)

# Sanitized code runs about twice as slowly (planted.py: 64 s plain, 117 s
# under ASan on a busy machine), so each test file gets twice the time.
test-asan: deps-test
	$(MAKE) WERROR=1 SANITIZE=address,undefined all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  DQ_TEST_TIMEOUT=$${DQ_TEST_TIMEOUT:-240} sh tests/run.sh build-san

valgrind: deps-test
	$(MAKE) all
	DQ_TEST_WRAPPER="valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible" \
	  sh tests/run.sh $(BUILD)

bench: deps
	$(MAKE) all
	sh bench/run.sh $(BUILD)

# clang's libFuzzer, on objects built with clang into build-fuzz/.
FUZZ_SECONDS ?= 60
fuzz: deps
	@sh tools/deps.sh clang
	$(MAKE) CC=clang BUILD=build-fuzz SANITIZE=fuzzer-no-link,address,undefined fuzz-objs
	sh tools/fuzz.sh build-fuzz $(FUZZ_SECONDS) '$(LAYER_INC)'

fuzz-objs: $(STATIC) $(CLI_OBJ)

check: test

# What install puts under $(DESTDIR)$(PREFIX), and uninstall removes.
INSTALLED = include/delayq.h lib/libdelayq.a lib/libdelayq.so.$(VERSION) lib/libdelayq.so.$(SOMAJOR) \
            lib/libdelayq.so lib/pkgconfig/delayq.pc bin/delayq
I = $(DESTDIR)$(PREFIX)
# The .pc describes an install, so install writes it, for this PREFIX (one
# written by a plain `make` would keep the PREFIX of that make).
# Both refuse a DESTDIR or PREFIX that is empty or that the shell would split
# or expand (a space made uninstall remove files outside them): the value
# reaches the check through the environment, unquoted by make.
install uninstall: export DQ_INSTALL_DIR = $(I)
INSTALL_PATH_OK = case "$$DQ_INSTALL_DIR" in ''|*[!A-Za-z0-9_./+@:=,-]*) \
	echo "make $@: DESTDIR and PREFIX ('$$DQ_INSTALL_DIR') may hold only A-Z a-z 0-9 _ . / + @ : = , -" >&2; exit 2;; esac
install: $(STATIC) $(SHARED) $(CLI)
	@$(INSTALL_PATH_OK)
	install -d $(I)/lib $(I)/include $(I)/bin $(I)/lib/pkgconfig
	install -m 644 include/delayq.h $(I)/include/
	install -m 644 $(STATIC) $(I)/lib/
	install -m 755 $(SHARED) $(I)/lib/libdelayq.so.$(VERSION)
	ln -sf libdelayq.so.$(VERSION) $(I)/lib/libdelayq.so.$(SOMAJOR)
	ln -sf libdelayq.so.$(SOMAJOR) $(I)/lib/libdelayq.so
	install -m 755 $(CLI) $(I)/bin/
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: delayq\nDescription: Redis-backed delay queue\nVersion: %s\nRequires.private: hiredis libsodium\nLibs: -L$${libdir} -ldelayq\nLibs.private: -lev -lssl -lcrypto -lm\nCflags: -I$${includedir}\n' '$(PREFIX)' '$(VERSION)' > $(I)/lib/pkgconfig/delayq.pc

uninstall:
	@$(INSTALL_PATH_OK)
	rm -f $(addprefix $(I)/,$(INSTALLED))

# clang-format 16 (Debian 12's clang-format-16; .clang-format needs 16 or
# later) over the C sources, in place, by .clang-format. Applied to the whole
# tree once (that commit is in .git-blame-ignore-revs); then before a commit.
# CLANG_FORMAT=... picks another binary of version 16 or later.
FORMAT_SRC = $(sort $(wildcard include/*.h src/*.[ch] src/*/*.[ch] src/*/*/*.[ch] tests/*.h tests/*/*.[ch] \
             tests/*/*/*.[ch] examples/*.[ch] bench/*.[ch] bench/*/*.[ch] fuzz/*.[ch]))
CLANG_FORMAT ?= clang-format-16
format:
	@command -v $(CLANG_FORMAT) >/dev/null || sh tools/deps.sh $(CLANG_FORMAT)
	$(CLANG_FORMAT) -i $(FORMAT_SRC)

format-check:
	@command -v $(CLANG_FORMAT) >/dev/null || sh tools/deps.sh $(CLANG_FORMAT)
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf build build-san build-fuzz
