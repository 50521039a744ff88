# CPU tests of the moegemm program (label cpu): a verified reduced run whose JSON matches docs/cli.md, and
# bad arguments answered with exit code 2 and a message that names the problem.
find_package(Python3 COMPONENTS Interpreter)
set(_cli $<TARGET_FILE:moegemm_cli>)

# Unit tests of the program's parts: tolerance check, routing, sampling, double-precision math, and that a
# verification fails on wrong or unwritten outputs.
# (Needs an installed GoogleTest: this folder is configured before tests/cpp, which can also build one from source.)
find_package(GTest QUIET)
if(GTest_FOUND)
  include(GoogleTest)
  add_executable(moegemm_cli_unit_tests ${CMAKE_CURRENT_SOURCE_DIR}/tests/cli_unit_tests.cpp)
  target_link_libraries(moegemm_cli_unit_tests PRIVATE moegemm_cli_core GTest::gtest GTest::gtest_main)
  gtest_discover_tests(moegemm_cli_unit_tests TEST_PREFIX cli.unit. PROPERTIES LABELS cpu DISCOVERY_TIMEOUT 60)
else()
  message(STATUS "moegemm program: unit tests not built (no installed GoogleTest: install libgtest-dev)")
endif()
set(_out ${CMAKE_CURRENT_BINARY_DIR}/test-output)
file(MAKE_DIRECTORY ${_out})

# A regex must not hold a ';' (a list separator here: the regex would be cut there); match it with '.'.
function(moegemm_cli_test name)
  cmake_parse_arguments(T "" "REGEX;TIMEOUT" "COMMAND" ${ARGN})
  add_test(NAME cli.${name} COMMAND ${T_COMMAND})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(cli.${name} PROPERTIES LABELS cpu TIMEOUT ${T_TIMEOUT})
  if(T_REGEX)
    set_tests_properties(cli.${name} PROPERTIES PASS_REGULAR_EXPRESSION "${T_REGEX}")
  endif()
endfunction()

# A reduced run of one preset and of every preset on the CPU backend: exit 0 and "verification passed".
# (ctest ignores exit codes when a regex is given: expect_exit.cmake checks them.)
set(_expect_0 ${CMAKE_COMMAND} -DEXPECT_CODE=0 -P ${CMAKE_CURRENT_SOURCE_DIR}/tests/expect_exit.cmake --)
moegemm_cli_test(run_one_preset COMMAND ${_expect_0} ${_cli} run --backend cpu --model qwen3-30b-a3b --tokens 32
                 REGEX "verification passed")
# The GPU path's oracle (the reference on a small problem built from sampled rows and experts) checked against
# the reference on the full problem: exercises the sampling and gathering the GPU verification relies on.
moegemm_cli_test(run_reference_oracle COMMAND ${_expect_0} ${_cli} run --backend cpu --oracle reference --tokens 48
                 --routing zipf REGEX "verification passed" TIMEOUT 300)
moegemm_cli_test(run_all_presets_zipf COMMAND ${_expect_0} ${_cli} run --backend cpu --tokens 16 --routing zipf --seed 3
                 REGEX "verification passed" TIMEOUT 300)

# The JSON document: written, and valid against the schema of docs/cli.md (checked with the Python stdlib).
if(Python3_Interpreter_FOUND)
  add_test(NAME cli.run_json_schema
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tests/check_run_json.py ${_cli} ${_out})
  set_tests_properties(cli.run_json_schema PROPERTIES LABELS cpu TIMEOUT 300)
endif()

# Help: the whole usage, or one command's own lines (exit 0, nothing run).
moegemm_cli_test(help COMMAND ${_expect_0} ${_cli} --help
                 REGEX "^usage: moegemm <command> \\[options\\][^\n]*\n\ncommands:\n  run .*\n  gemm .*\n  bench .*exit codes")
moegemm_cli_test(run_help COMMAND ${_expect_0} ${_cli} run --model nope --help
                 REGEX "^usage: moegemm run \\[options\\]\n\n  run     one MoE layer[^\n]*\n([^\n]*\n)+[^\n]*\\(CPU default\\)\n\nexit codes")
moegemm_cli_test(gemm_help COMMAND ${_expect_0} ${_cli} gemm -h
                 REGEX "^usage: moegemm gemm \\[options\\]\n\n  gemm    one grouped_gemm[^\n]*\n[^\n]*rows in groups[^\n]*\n[^\n]*--m M[^\n]*\n([^\n]*\n)*[^\n]*--layout[^\n]*\n\nexit codes")

# Bad arguments: exit code 2 and a message naming the problem.
set(_expect_1 ${CMAKE_COMMAND} -DEXPECT_CODE=1 -P ${CMAKE_CURRENT_SOURCE_DIR}/tests/expect_exit.cmake --)
set(_expect_2 ${CMAKE_COMMAND} -DEXPECT_CODE=2 -P ${CMAKE_CURRENT_SOURCE_DIR}/tests/expect_exit.cmake --)
# A workloads file that `run` refuses before anything runs: tests/workloads_<name>.json, exit code 2 and the
# message matching `regex`.
function(moegemm_bad_workloads_test name regex)
  moegemm_cli_test(workloads_${name} COMMAND ${_expect_2} ${_cli} run --backend cpu
                   --workloads ${CMAKE_CURRENT_SOURCE_DIR}/tests/workloads_${name}.json REGEX "${regex}")
endfunction()
moegemm_cli_test(unknown_model COMMAND ${_expect_2} ${_cli} run --model no-such-model
                 REGEX "--model: unknown model 'no-such-model' \\(known: mixtral-8x7b")
moegemm_cli_test(negative_tokens COMMAND ${_expect_2} ${_cli} run --tokens -5 REGEX "--tokens: must be >= 1, got -5")
# Refused before the run prints anything (the output starts with the message).
moegemm_cli_test(too_many_tokens COMMAND ${_expect_2} ${_cli} run --backend cpu --model qwen3-30b-a3b
                 --tokens 9223372036854775807 REGEX "^moegemm: --tokens: 9223372036854775807 tokens x top_k 8")
# A usage error comes before the missing GPU (exit 1 on a machine without one), also with --backend gpu.
moegemm_cli_test(too_many_tokens_backend_gpu COMMAND ${_expect_2} ${_cli} run --backend gpu --model qwen3-30b-a3b
                 --tokens 9223372036854775807 REGEX "^moegemm: --tokens: 9223372036854775807 tokens x top_k 8")
moegemm_cli_test(run_json_to_stdout COMMAND ${_expect_2} ${_cli} run --backend cpu --json -
                 REGEX "--json: run prints its table on standard output")
# A preset's rows are checked when its file is read, whichever backend would run it (the CPU backend runs 64
# tokens of every model).
# A file that is not UTF-8 text: the parser's message quotes the bytes it read, escaped.
moegemm_bad_workloads_test(not_utf8
                           "^moegemm: [^\n]*workloads_not_utf8.json is not valid JSON: [^\n]*last read: '\\\\xff'")
moegemm_bad_workloads_test(rows_past_int32
                           "^moegemm: [^\n]*workloads_rows_past_int32.json: model huge: 4194304 tokens x top_k 1024 exceed the 2147483647 rows")
# Tensor sizes past what int64 bytes hold are refused when the file is read, with the file's sizes (they used
# to wrap), and for --tokens with the sizes of the backend that would run.
moegemm_bad_workloads_test(hidden_past_2_60
                           "^moegemm: [^\n]*workloads_hidden_past_2_60.json: model wide: tokens x top_k x hidden \\(16 x 9223372036854775800\\) elements exceed 2\\^60")
moegemm_bad_workloads_test(intermediate_past_2_60
                           "^moegemm: [^\n]*workloads_intermediate_past_2_60.json: model deep: 2 intermediate \\(2 x 9223372036854775800\\) elements exceed 2\\^60")
moegemm_cli_test(tokens_past_2_60_elements COMMAND ${_expect_2} ${_cli} run --backend cpu --model big --tokens 16777216
                 --workloads ${CMAKE_CURRENT_SOURCE_DIR}/tests/workloads_hidden_2_40.json
                 REGEX "^moegemm: --tokens 16777216 with model big \\(the CPU backend's sizes\\): tokens x top_k x hidden \\(16777216 x 137438953472\\) elements exceed 2\\^60")
moegemm_bad_workloads_test(empty_model_name
                           "^moegemm: workloads file [^\n]*workloads_empty_model_name.json: a model with an empty or blank name")
moegemm_bad_workloads_test(blank_model_name
                           "^moegemm: workloads file [^\n]*workloads_blank_model_name.json: a model with an empty or blank name")
# Row lengths of bf16 operands (hidden, intermediate; a gemm's N and K) are refused off a multiple of 8 when the
# file is read, where the ops would refuse them once the run had started (exit 1).
moegemm_bad_workloads_test(hidden_not_multiple_of_8
                           "^moegemm: [^\n]*workloads_hidden_not_multiple_of_8.json: model odd: field \"hidden\" must be a multiple of 8 \\(bf16 rows of 16-byte multiples\\), got 65")
moegemm_bad_workloads_test(gemm_k_not_multiple_of_8
                           "^moegemm: [^\n]*workloads_gemm_k_not_multiple_of_8.json: gemm odd: field \"K\" must be a multiple of 8 \\(bf16 rows of 16-byte multiples\\), got 36")
moegemm_bad_workloads_test(missing_field
                           "^moegemm: [^\n]*workloads_missing_field.json: model short: field \"intermediate\" is missing \\(a positive integer\\)")
moegemm_bad_workloads_test(models_list
                           "^moegemm: workloads file [^\n]*workloads_models_list.json: \"models\" must be an object of named models, got array")
moegemm_cli_test(model_from_empty_workloads COMMAND ${_expect_2} ${_cli} run --backend cpu --model x
                 --workloads ${CMAKE_CURRENT_SOURCE_DIR}/tests/workloads_no_models.json
                 REGEX "--model: unknown model 'x' \\(the workloads file has no models\\)")
moegemm_cli_test(empty_workloads COMMAND ${_expect_2} ${_cli} run --backend cpu
                 --workloads ${CMAKE_CURRENT_SOURCE_DIR}/tests/workloads_no_models.json
                 REGEX "^moegemm: workloads file [^\n]*workloads_no_models.json has no models")
moegemm_cli_test(workloads_directory COMMAND ${_expect_2} ${_cli} run --backend cpu
                 --workloads ${CMAKE_CURRENT_SOURCE_DIR}/tests
                 REGEX "--workloads: '[^\n]*tests' is a directory, not a workloads file")
# An integer past int64 (nlohmann keeps it unsigned) is named with the limit, not called non-positive.
moegemm_bad_workloads_test(field_past_int64
                           "model big: field \"tokens\" must be at most 9223372036854775807, got 18446744073709551615")
# Past 2^64 - 1 the parser reads the integer as a double: still named with the limit.
moegemm_bad_workloads_test(field_past_uint64
                           "model huge: field \"hidden\" must be at most 9223372036854775807, got 1e\\+20")
moegemm_cli_test(gemm_missing_shape COMMAND ${_expect_2} ${_cli} gemm --m 64 --k 64
                 REGEX "gemm: --m, --n, --k and --e are required. missing: --n, --e")
moegemm_cli_test(non_numeric_tokens COMMAND ${_expect_2} ${_cli} run --tokens many
                 REGEX "--tokens: expected an integer, got 'many'")
moegemm_cli_test(tokens_out_of_range COMMAND ${_expect_2} ${_cli} run --tokens 99999999999999999999
                 REGEX "--tokens: must be <= 9223372036854775807, got 99999999999999999999")
moegemm_cli_test(seed_below_int64 COMMAND ${_expect_2} ${_cli} run --seed -99999999999999999999
                 REGEX "--seed: must be >= 0, got -99999999999999999999")
moegemm_cli_test(iters_past_int COMMAND ${_expect_2} ${_cli} gemm --m 64 --n 64 --k 64 --e 2 --iters 4294967297
                 REGEX "--iters: must be <= 2147483647, got 4294967297")
moegemm_cli_test(json_is_directory COMMAND ${_expect_2} ${_cli} run --json ${_out} REGEX "is a directory")
moegemm_cli_test(json_missing_folder COMMAND ${_expect_2} ${_cli} run --json /nonexistent/dir/x.json
                 REGEX "folder '/nonexistent/dir' does not exist")
moegemm_cli_test(json_parent_is_a_file COMMAND ${_expect_2} ${_cli} run --json ${CMAKE_CURRENT_SOURCE_DIR}/main.cpp/x.json
                 REGEX "main.cpp' is not a folder")
# A file that refuses writes whoever runs the program (for root too, whom access() would let through).
if(EXISTS /proc/version)
  moegemm_cli_test(json_file_not_writable COMMAND ${_expect_2} ${_cli} run --backend cpu --json /proc/version
                   REGEX "--json: cannot write '/proc/version': file is not writable")
  # A new file in a folder that refuses new files even to root: refused before any work too.
  moegemm_cli_test(json_file_cannot_be_created COMMAND ${_expect_2} ${_cli} run --backend cpu --json /proc/moegemm.json
                   REGEX "--json: cannot write '/proc/moegemm.json': (cannot create the file|folder '/proc' is not writable)")
endif()
moegemm_cli_test(repeated_flag COMMAND ${_expect_2} ${_cli} run --model qwen3-30b-a3b --model mixtral-8x7b
                 REGEX "--model: given more than once \\('qwen3-30b-a3b', then 'mixtral-8x7b'\\)")
moegemm_cli_test(gemm_routing_with_group_sizes COMMAND ${_expect_2} ${_cli} gemm --m 64 --n 64 --k 64 --e 2
                 --group-sizes 32,32 --routing zipf REGEX "--routing: 'zipf' not used with --group-sizes")
moegemm_cli_test(gemm_group_sizes_past_m COMMAND ${_expect_2} ${_cli} gemm --m 64 --n 64 --k 64 --e 2
                 --group-sizes 40,40 REGEX "--group-sizes: the first 2 sizes sum past --m 64 \\(size 2 is 40\\)")
moegemm_cli_test(gemm_first_group_size_past_m COMMAND ${_expect_2} ${_cli} gemm --m 100 --n 64 --k 64 --e 2
                 --group-sizes 101,0 REGEX "--group-sizes: size 1 is 101, past --m 100")
# Sizes whose int64 sum wraps around must not pass the check either.
moegemm_cli_test(gemm_group_sizes_wrap COMMAND ${_expect_2} ${_cli} gemm --m 64 --n 64 --k 64 --e 2
                 --group-sizes 64,9223372036854775807 REGEX "--group-sizes: the first 2 sizes sum past --m 64")
moegemm_cli_test(gemm_m_past_int32_offsets COMMAND ${_expect_2} ${_cli} gemm --m 3000000000 --n 64 --k 64 --e 2
                 REGEX "--m: 3000000000 rows exceed the 2147483647 that int32 expert offsets address")
moegemm_cli_test(gemm_unaligned_n COMMAND ${_expect_2} ${_cli} gemm --m 64 --n 33 --k 64 --e 2
                 REGEX "grouped_gemm: b: expected N \\* sizeof\\(bf16\\) a multiple of 16 bytes.*got N=33")
# The kernels' 32-bit limits on N and K are the contract's for device operands: refused on any machine.
moegemm_cli_test(gemm_n_past_int32 COMMAND ${_expect_2} ${_cli} gemm --m 8 --n 2147483648 --k 8 --e 1
                 REGEX "grouped_gemm: b: expected N <= 2147483647 on the cuda backend.*got N=2147483648")
moegemm_cli_test(gemm_k_past_int32 COMMAND ${_expect_2} ${_cli} gemm --m 8 --n 8 --k 4294967296 --e 1
                 REGEX "grouped_gemm: a: expected K <= 2147483647 on the cuda backend.*got K=4294967296")
moegemm_cli_test(gemm_too_many_experts COMMAND ${_expect_2} ${_cli} gemm --m 4096 --n 64 --k 64 --e 2000
                 REGEX "--e: must be <= 1024, got 2000")
# A count past int64's bytes of offsets is named by its flag too, not by the offsets' size.
moegemm_cli_test(gemm_experts_past_int64 COMMAND ${_expect_2} ${_cli} gemm --m 64 --n 64 --k 64
                 --e 9223372036854775807 REGEX "--e: must be <= 1024, got 9223372036854775807")
moegemm_cli_test(unknown_flag COMMAND ${_expect_2} ${_cli} run --frobnicate 1 REGEX "unknown option '--frobnicate'")
# One pointer to --help (main's), not a second one in the message.
moegemm_cli_test(unknown_flag_one_help_hint COMMAND ${_expect_2} ${_cli} run --frobnicate 1
                 REGEX "unknown option '--frobnicate'.[(]moegemm --help lists")
# (An empty argument is dropped by CMake: the inline form passes it.)
moegemm_cli_test(empty_workloads_path COMMAND ${_expect_2} ${_cli} run --workloads= REGEX "--workloads: empty path")
moegemm_cli_test(unknown_routing COMMAND ${_expect_2} ${_cli} run --routing pareto
                 REGEX "--routing: expected uniform or zipf, got 'pareto'")
moegemm_cli_test(missing_value COMMAND ${_expect_2} ${_cli} run --model REGEX "--model: missing value")
# A flag in a value's place names the flag whose value is missing, not the next value as an unknown option.
moegemm_cli_test(missing_value_before_flag COMMAND ${_expect_2} ${_cli} run --model --tokens 4
                 REGEX "--model: missing value \\(got the option '--tokens' in its place\\)")
# A field of the wrong type is named with what was given; a NUL byte ended the parse before the rest.
moegemm_bad_workloads_test(tokens_string "model m: field \"tokens\" must be a positive integer, got \"64\"")
moegemm_bad_workloads_test(nul_byte "workloads_nul_byte.json is not valid JSON: a NUL byte at offset 92")
moegemm_cli_test(unknown_command COMMAND ${_expect_2} ${_cli} frobnicate REGEX "unknown command 'frobnicate'")
moegemm_cli_test(unreadable_workloads COMMAND ${_expect_2} ${_cli} run --workloads /nonexistent/w.json
                 REGEX "--workloads: cannot read workloads file /nonexistent/w.json")
# An endless stream is read up to a cap, not into all of the memory.
moegemm_cli_test(endless_workloads COMMAND ${_expect_2} ${_cli} run --backend cpu --workloads /dev/zero TIMEOUT 60
                 REGEX "--workloads: workloads file /dev/zero is larger than 16 MiB \\(a workloads file is a small JSON document\\)")
moegemm_bad_workloads_test(too_many_experts
                           "model wide: field \"experts\" must be at most 1024 \\(the ops' limit on experts\\), got 2000")
moegemm_cli_test(malformed_workloads COMMAND ${_expect_2} ${_cli} run --workloads ${CMAKE_CURRENT_SOURCE_DIR}/main.cpp
                 REGEX "is not valid JSON")
# A key given twice would have one of its values dropped silently; a misspelt field would be ignored.
moegemm_bad_workloads_test(duplicate_key
                           "workloads_duplicate_key.json: key \"top_k\" appears twice in object \"twice\"")
moegemm_bad_workloads_test(unknown_field
                           "model typo: unknown field \"topk\" \\(known: tokens, top_k, experts, hidden, intermediate\\)")
moegemm_bad_workloads_test(gemm_unknown_field
                           "gemm 0: unknown field \"bias\" \\(known: name, M, N, K, E\\)")
moegemm_bad_workloads_test(top_k_past_experts
                           "model narrow: field \"top_k\" must be at most \"experts\" = 8 \\(a token goes to top_k distinct experts\\), got 9\n")
# Nesting past the limit is refused before the parser's memory grows with the depth (it took gigabytes for
# 10^5 nested arrays).
moegemm_bad_workloads_test(nested_too_deep
                           "workloads_nested_too_deep.json: nested deeper than 32 levels \\(its schema nests 3\\)")
# Valid JSON whose number no double holds: nlohmann's out_of_range, not a parse_error (it used to exit 1).
moegemm_bad_workloads_test(number_overflow
                           "workloads file [^\n]*workloads_number_overflow.json cannot be parsed: [^\n]*number overflow")

# A --json file whose write fails at the end (a full device): exit code 1 and the path named, for both commands
# (gemm exits 1 without a GPU anyway; the message is what is checked).
if(EXISTS /dev/full)
  moegemm_cli_test(run_json_write_fails COMMAND ${_expect_1} ${_cli} run --backend cpu --model qwen3-30b-a3b
                   --tokens 4 --json /dev/full REGEX "cannot write /dev/full")
  moegemm_cli_test(gemm_json_write_fails COMMAND ${_expect_1} ${_cli} gemm --m 64 --n 64 --k 64 --e 2
                   --json /dev/full REGEX "cannot write /dev/full")
endif()

# `moegemm bench` hands over to peers.py (a stub here that prints what it got): the program's path and the
# arguments, and, in a tree that builds the Python package, that package after the caller's PYTHONPATH.
if(MOEGEMM_BUILD_PYTHON)
  set(_bench_path "PYTHONPATH=/caller/path:[^\n]*/python\n")
else()
  set(_bench_path "PYTHONPATH=/caller/path\n")
endif()
# A MOEGEMM_BENCH_DIR without peers.py is an error naming it, not a fall back to another copy of the scripts.
moegemm_cli_test(bench_dir_without_peers COMMAND ${CMAKE_COMMAND} -E env
                 MOEGEMM_BENCH_DIR=${CMAKE_CURRENT_SOURCE_DIR}/tests/no_such_folder ${_expect_1} ${_cli} bench --quick
                 REGEX "bench/peers.py not found; looked in:\n  [^\n]*tests/no_such_folder\nset MOEGEMM_BENCH_DIR")
moegemm_cli_test(bench_hands_over COMMAND ${CMAKE_COMMAND} -E env
                 MOEGEMM_BENCH_DIR=${CMAKE_CURRENT_SOURCE_DIR}/tests/bench_stub PYTHONPATH=/caller/path
                 ${_expect_0} ${_cli} bench --quick
                 REGEX "argv: --moegemm-bin [^\n]*moegemm --quick\n${_bench_path}")

# A layer too large for the host is refused at once: its tensors are allocated before its rows are routed,
# which for 2^31 rows takes minutes. Where the kernel hands out any allocation (overcommit_memory = 1) the
# allocation does not fail, and the test is not added.
set(_overcommit "")
if(EXISTS /proc/sys/vm/overcommit_memory)
  file(READ /proc/sys/vm/overcommit_memory _overcommit)
endif()
if(NOT _overcommit MATCHES "^1")
  moegemm_cli_test(run_layer_past_host_memory COMMAND ${_expect_1} ${_cli} run --backend cpu --model deepseek-v3
                   --tokens 268435455 REGEX "out of host memory" TIMEOUT 20)
endif()
