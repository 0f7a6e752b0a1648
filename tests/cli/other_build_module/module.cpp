// A stand-in for the CUDA backend module of another normlab build: the entry point the loader
// looks for, and a table whose build id is not this build's. The loader must refuse it after
// reading the id alone, so nothing past it is filled in.
namespace {

struct OtherBuildTable {
  const char* build_id;
  void* rest[16];
};
const OtherBuildTable kTable = {"0.0.1@000000000000+0123456789ab", {}};

}  // namespace

extern "C" const void* normlab_cuda_module() { return &kTable; }
