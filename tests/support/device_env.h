// For test programs that ctest also runs with SLUICE_DEVICE=cuda (FixturesOnCuda, TrainedModelOnCuda): when the
// device the environment names is not usable here, skip every test at once with the reason (ctest's skip pattern
// matches it) instead of failing the first test and running the rest on the CPU, a whole second CPU run (67 s of
// the ASan stage).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "ops/ops.h"

namespace sluice::test {

class DeviceFromEnvironment : public ::testing::Environment {
public:
    void SetUp() override {
        const char* env = std::getenv("SLUICE_DEVICE");
        if (!env || !*env) return;
        try {
            (void)ops::backend();  // reads SLUICE_DEVICE; throws if it names a device that is not usable
        } catch (const Error& e) {
            GTEST_SKIP() << e.what();
        }
    }
};

inline const bool g_device_environment_added =
    (::testing::AddGlobalTestEnvironment(new DeviceFromEnvironment), true);

}  // namespace sluice::test
