// The packed expert store: `sluice pack` of every fixture verifies, and streaming from it (one folder or striped
// over two) gives logits bit-identical to the resident run. A corrupted byte is named by --verify and fails a
// verified read cleanly; a truncated data file, a missing manifest, a manifest of another model and a manifest
// that disagrees with the weights are each one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/fixtures.h"
#include "../support/st_builder.h"
#include "../support/test_util.h"
#include "core/error.h"
#include "experts/packed_store.h"
#include "models/expert_pack.h"
#include "models/model.h"
#include "runtime/generate.h"

using namespace sluice;
using namespace sluice::test;
namespace fs = std::filesystem;

namespace {

const std::string kK2 = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/k2_noqlora";

PackResult pack(const std::string& src, const std::string& dst, std::vector<std::string> data_dirs = {}) {
    PackOptions o;
    o.src_dir = src;
    o.dst_dir = dst;
    o.data_dirs = std::move(data_dirs);
    o.n_threads = 2;
    o.batch_bytes = 64 << 10;  // several batches even for the small fixtures: exercises the pipeline
    return pack_experts(o);
}

LoadOptions packed_options(std::vector<std::string> dirs, uint64_t cache_bytes = 0, bool verify = false) {
    LoadOptions opt{.n_threads = 2};
    opt.streaming.experts_dirs = std::move(dirs);
    opt.streaming.cache_bytes = cache_bytes;
    opt.streaming.staging_experts = 2;
    opt.streaming.verify_reads = verify;
    return opt;
}

PackedManifest manifest_in(const std::string& dir) {
    std::ifstream f(dir + "/" + k_packed_manifest_name);
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_manifest(ss.str(), dir);
}

class PackTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PackTest, VerifiesAndStreamsBitIdentical) {
    const std::string dir = GetParam();
    const auto ids = fixture_prompt(dir);
    auto resident = load_model(dir, {.n_threads = 2});
    if (resident->info().expert_bytes == 0) GTEST_SKIP() << "no routed experts";
    const auto want = prompt_logits(*resident, ids, 8);
    const std::string tmp = test::temp_dir("pack_" + fs::path(dir).filename().string());

    const auto r = pack(dir, tmp + "/one");
    const uint64_t n_experts = uint64_t(resident->info().n_moe_layers * resident->info().n_routed_experts);
    EXPECT_EQ(r.n_experts, n_experts);
    const auto v = verify_packed_store({tmp + "/one"});
    EXPECT_EQ(v.n_experts, n_experts);
    const PackedManifest m = manifest_in(tmp + "/one");
    for (const auto& e : m.experts) {
        EXPECT_EQ(e.offset % 4096, 0u);
        for (const auto& p : e.parts) EXPECT_EQ(p[0] % 4096, 0u);
    }
    {
        auto streamed = load_model(dir, packed_options({tmp + "/one"}, 0, true));
        ASSERT_NE(streamed->streaming(), nullptr);
        EXPECT_EQ(prompt_logits(*streamed, ids, 8), want);
        const auto& st = streamed->streaming()->stats();
        EXPECT_EQ(st.experts_read, st.experts_requested);
        // one aligned read per expert, no padding beyond the expert's last 4 KiB page
        for (const auto& bank : streamed->streaming()->layout().where)
            for (const auto& loc : bank) EXPECT_EQ(loc.n_reads, 1);
    }

    // striped over two data folders; found through the manifest's record, or through the folders given
    pack(dir, tmp + "/man", {tmp + "/d0", tmp + "/d1"});
    EXPECT_TRUE(fs::exists(tmp + "/d0/experts-00.bin"));
    EXPECT_TRUE(fs::exists(tmp + "/d1/experts-01.bin"));
    EXPECT_FALSE(fs::exists(tmp + "/man/experts-00.bin"));
    verify_packed_store({tmp + "/man"});
    for (const auto& dirs :
         {std::vector<std::string>{tmp + "/man"}, std::vector<std::string>{tmp + "/man", tmp + "/d0", tmp + "/d1"}}) {
        auto streamed = load_model(dir, packed_options(dirs, 3 * (resident->info().expert_bytes + 6 * 8192)));
        EXPECT_EQ(prompt_logits(*streamed, ids, 8), want) << dirs.size() << " folders";
        EXPECT_EQ(streamed->streaming()->reader().n_files(), 2u);
    }
    fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PackTest, ::testing::ValuesIn(fixture_dirs()), fixture_name);

}  // namespace

TEST(Pack, CorruptByteIsNamedAndFailsVerifiedReads) {
    const std::string tmp = test::temp_dir("pack_corrupt");
    pack(kK2, tmp + "/s");
    const PackedManifest m = manifest_in(tmp + "/s");
    const PackedExpert& bad = m.experts[m.experts.size() / 2 + 1];
    const std::string file = tmp + "/s/" + m.files[bad.file].name;
    {
        std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(std::streamoff(bad.offset + bad.length / 2));
        char c = 0;
        f.read(&c, 1);
        c = char(c ^ 0x10);
        f.seekp(std::streamoff(bad.offset + bad.length / 2));
        f.write(&c, 1);
    }
    const std::string msg = error_of([&] { verify_packed_store({tmp + "/s"}); });
    EXPECT_NE(msg.find("layer " + std::to_string(bad.layer) + " expert " + std::to_string(bad.expert) + " "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("experts-00.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset " + std::to_string(bad.offset)), std::string::npos) << msg;

    // a verified read fails the request and leaves nothing cached; other experts still serve
    auto model = load_model(kK2, packed_options({tmp + "/s"}, 64 << 20, true));
    auto* src = const_cast<StreamingExpertSource*>(model->streaming());
    const int32_t bad_id[] = {bad.expert};
    const std::string read_msg = error_of([&] { src->fetch(bad.layer, bad_id, [](size_t, const ExpertWeights&) {}); });
    EXPECT_NE(read_msg.find("checksum mismatch"), std::string::npos) << read_msg;
    EXPECT_NE(read_msg.find("expert " + std::to_string(bad.expert)), std::string::npos) << read_msg;
    EXPECT_FALSE(src->cache().contains({bad.layer, bad.expert}));
    EXPECT_FALSE(error_of([&] { src->fetch(bad.layer, bad_id, [](size_t, const ExpertWeights&) {}); }).empty());
    const int32_t good_id[] = {bad.expert == 0 ? 1 : 0};
    int served = 0;
    src->fetch(bad.layer, good_id, [&](size_t, const ExpertWeights&) { ++served; });
    EXPECT_EQ(served, 1);
    // without verification the corrupt byte goes unnoticed by the read path (so the check above is what caught it)
    auto unverified = load_model(kK2, packed_options({tmp + "/s"}));
    EXPECT_TRUE(error_of([&] {
                    const_cast<StreamingExpertSource*>(unverified->streaming())
                        ->fetch(bad.layer, bad_id, [](size_t, const ExpertWeights&) {});
                }).empty());
    fs::remove_all(tmp);
}

TEST(Pack, TruncatedMissingAndForeignStoresAreClearErrors) {
    const std::string tmp = test::temp_dir("pack_errors");
    pack(kK2, tmp + "/s");

    // manifest of another model
    const std::string other = std::string(SLUICE_TEST_DATA_DIR) + "/fixtures/dsv3_qlora_group_yarn";
    std::string msg = error_of([&] { load_model(other, packed_options({tmp + "/s"})); });
    EXPECT_NE(msg.find("manifest.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("source.config_xxh3"), std::string::npos) << msg;

    // missing manifest
    fs::create_directories(tmp + "/empty");
    msg = error_of([&] { load_model(kK2, packed_options({tmp + "/empty"})); });
    EXPECT_NE(msg.find("no manifest.json"), std::string::npos) << msg;
    msg = error_of([&] { verify_packed_store({tmp + "/empty"}); });
    EXPECT_NE(msg.find("no manifest.json"), std::string::npos) << msg;

    // a manifest that disagrees with the model's weights names the field
    {
        std::ifstream f(tmp + "/s/manifest.json");
        auto j = nlohmann::json::parse(f);
        j["layers"][0]["matrices"]["up"]["rows"] = j["layers"][0]["matrices"]["up"]["rows"].get<int64_t>() + 1;
        fs::create_directories(tmp + "/edited");
        fs::copy_file(tmp + "/s/experts-00.bin", tmp + "/edited/experts-00.bin");
        std::ofstream(tmp + "/edited/manifest.json") << j.dump();
    }
    msg = error_of([&] { load_model(kK2, packed_options({tmp + "/edited"})); });
    EXPECT_NE(msg.find("matrices.up"), std::string::npos) << msg;
    EXPECT_NE(msg.find("edited/manifest.json"), std::string::npos) << msg;

    // truncated data file
    const uint64_t size = fs::file_size(tmp + "/s/experts-00.bin");
    fs::resize_file(tmp + "/s/experts-00.bin", size - 4096);
    msg = error_of([&] { load_model(kK2, packed_options({tmp + "/s"})); });
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("experts-00.bin"), std::string::npos) << msg;
    msg = error_of([&] { verify_packed_store({tmp + "/s"}); });
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

    // a missing data file
    fs::remove(tmp + "/s/experts-00.bin");
    msg = error_of([&] { load_model(kK2, packed_options({tmp + "/s"})); });
    EXPECT_NE(msg.find("experts-00.bin not found"), std::string::npos) << msg;
    fs::remove_all(tmp);
}

// Manifest fields of the wrong type or with numbers that would overflow the bounds checks (found by
// fuzz_packed_manifest: a non-string "format" threw past every handler, and offset + length could wrap).
TEST(Pack, ManifestWrongTypesAndOverflowsAreClearErrors) {
    const std::string tmp = test::temp_dir("pack_manifest");
    pack(kK2, tmp + "/s");
    std::ifstream f(tmp + "/s/manifest.json");
    const auto good = nlohmann::json::parse(f);
    const auto error_for = [&](const std::function<void(nlohmann::json&)>& edit) {
        auto j = good;
        edit(j);
        return error_of([&] { parse_manifest(j.dump(), "m.json"); });
    };
    EXPECT_EQ(error_for([](nlohmann::json&) {}), "");
    std::string msg = error_for([](nlohmann::json& j) { j["format"] = 5; });
    EXPECT_NE(msg.find("m.json: field format must be"), std::string::npos) << msg;
    const uint64_t huge = ~uint64_t(0) / 4096 * 4096;  // aligned, and offset + padded length wraps past 2^64
    msg = error_for([&](nlohmann::json& j) { j["experts"][0]["offset"] = huge; });
    EXPECT_NE(msg.find("ends past its file"), std::string::npos) << msg;
    msg = error_for([&](nlohmann::json& j) { j["experts"][0]["length"] = ~uint64_t(0) - 100; });
    EXPECT_NE(msg.find("ends past its file"), std::string::npos) << msg;
    msg = error_for([&](nlohmann::json& j) { j["experts"][0]["parts"][0] = {huge, 8192}; });
    EXPECT_NE(msg.find("parts[0]"), std::string::npos) << msg;
    fs::remove_all(tmp);
}

TEST(Pack, CliPackAndVerify) {
    const std::string tmp = test::temp_dir("pack_cli");
    auto run = [](const std::string& args) {
        return WEXITSTATUS(std::system((std::string(SLUICE_BINARY) + " " + args + " >/dev/null 2>&1").c_str()));
    };
    EXPECT_EQ(run("pack " + kK2 + " " + tmp + "/s --dirs " + tmp + "/a," + tmp + "/b -t 1"), 0);
    EXPECT_EQ(run("pack --verify " + tmp + "/s"), 0);
    EXPECT_EQ(
        run("logits -m " + kK2 + " --ids 1,2,3 -o " + tmp + "/l.npy -t 1 --experts-dir " + tmp + "/s --verify-reads"),
        0);
    fs::resize_file(tmp + "/b/experts-01.bin", 4096);
    EXPECT_NE(run("pack --verify " + tmp + "/s"), 0);
    EXPECT_NE(run("pack --verify " + tmp + "/nowhere"), 0);
    fs::remove_all(tmp);
}
