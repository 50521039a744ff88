# ctest driver: a wheel build (SKBUILD) whose Python imports neither jax nor torch is refused at configure time,
# naming the fix, unless the caller turns both bindings off. PYTHON is an interpreter that has site-packages;
# the wrapper written here runs it with -S -I, so that neither framework is importable.
set(wrapper ${BINARY}/python_without_site_packages)
file(WRITE ${wrapper} "#!/bin/sh\nexec \"${PYTHON}\" -S -I \"$@\"\n")
file(CHMOD ${wrapper} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
set(common -S ${SOURCE} -G ${GENERATOR} -DSKBUILD=2 -DMOEGEMM_BUILD_PYTHON=ON -DMOEGEMM_BUILD_TESTS=OFF
           -DMOEGEMM_BUILD_TOOLS=OFF -DPython3_EXECUTABLE=${wrapper})
file(REMOVE_RECURSE ${BINARY}/refused)
execute_process(COMMAND ${CMAKE_COMMAND} ${common} -B ${BINARY}/refused
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX REPLACE "[ \n]+" " " err "${err}")  # CMake wraps the message
if(rc EQUAL 0 OR NOT err MATCHES "this wheel would have neither front end.*pip install --no-build-isolation")
  message(FATAL_ERROR "a wheel without front ends was not refused as expected (exit ${rc}):\n${err}")
endif()
file(REMOVE_RECURSE ${BINARY}/chosen)
execute_process(COMMAND ${CMAKE_COMMAND} ${common} -B ${BINARY}/chosen -DMOEGEMM_BUILD_JAX=OFF
                        -DMOEGEMM_BUILD_TORCH=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "a wheel with both bindings turned off did not configure (exit ${rc}):\n${err}")
endif()
# pip passes AUTO on every wheel build (pyproject.toml): the folder's earlier OFF is not kept, the frameworks are
# looked up again, and this Python has neither, so the build is refused again.
execute_process(COMMAND ${CMAKE_COMMAND} ${common} -B ${BINARY}/chosen -DMOEGEMM_BUILD_JAX=AUTO
                        -DMOEGEMM_BUILD_TORCH=AUTO
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX REPLACE "[ \n]+" " " err "${err}")
if(rc EQUAL 0 OR NOT err MATCHES "this wheel would have neither front end")
  message(FATAL_ERROR "AUTO kept the build folder's earlier choice (exit ${rc}):\n${err}")
endif()
