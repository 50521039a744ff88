// Every public header, compiled as a user's own code (-I, not -isystem) under strict warnings
// (tests/package/CMakeLists.txt): a header that warns there breaks a user's -Werror build.
#include <moegemm/moegemm.hpp>
