// Replay driver for fuzz targets outside `--config=fuzz`: runs
// LLVMFuzzerTestOneInput once on each file named on the command line (and on a
// few fixed inputs), so every fuzz target is built and exercised by the test
// suite. The real fuzzer is the same source built with --config=fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  // Edge cases every parser must survive, even with no corpus.
  std::vector<uint8_t> zeros(4096, 0), ones(4096, 0xff);
  LLVMFuzzerTestOneInput(nullptr, 0);
  for (size_t n : {1u, 13u, 14u, 42u, 60u, 64u, 1500u, 4096u}) {
    LLVMFuzzerTestOneInput(zeros.data(), n);
    LLVMFuzzerTestOneInput(ones.data(), n);
  }
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "fuzz replay: cannot open %s\n", argv[i]);
      return 1;
    }
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  std::printf("fuzz replay: %d inputs ok\n", argc - 1);
  return 0;
}
