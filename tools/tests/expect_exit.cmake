# Runs the command given after `-P expect_exit.cmake --` and fails unless it exits with EXPECT_CODE. Its output is
# echoed only then, so a test's PASS_REGULAR_EXPRESSION (which makes ctest ignore exit codes) cannot match
# a run that ended with the wrong code.
set(cmd)
set(take OFF)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  # The `--` keeps cmake from reading the command's own flags (it would take a --help or -h for itself).
  if(take AND (cmd OR NOT "${CMAKE_ARGV${i}}" STREQUAL "--"))
    list(APPEND cmd "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" MATCHES "expect_exit\\.cmake$")
    set(take ON)
  endif()
endforeach()
execute_process(COMMAND ${cmd} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL EXPECT_CODE)
  message(FATAL_ERROR "expected exit code ${EXPECT_CODE}, got ${code}")
endif()
message("${out}${err}")
