// inband: runs the sparse chip kernel (compiled for the CPU against cuda_on_cpu.hpp) on
// the tables the host wrote for it, one launch after another on one machine's state,
// and prints each launch's chosen tokens: `gpu::emulation` writes the inputs and reads
// the answer.
//
//   run_kernel CHIP RUN [SCHEDULE]
//                     CHIP: dims, layers, i, e, w (little-endian words), shared (the
//                     dynamic shared memory's bytes, decimal); RUN: s (the machine's
//                     state floats), launches (a line each: n_inputs max_passes
//                     stop_mask and the input token ids); SCHEDULE:
//                     the threads' order (0 in order, the default; 1 reversed; else a
//                     seed they are shuffled from each time round)
//   prints a line per launch: passes done, error code, the chosen token ids
#include "cuda_on_cpu.hpp"
#include KERNEL_FILE

#include <fstream>
#include <sstream>
#include <string>

static std::vector<unsigned char> read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        std::fprintf(stderr, "run_kernel: cannot read %s\n", path.c_str());
        std::exit(2);
    }
    return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), {});
}

template <class T> static std::vector<T> read_array(const std::string &path) {
    auto bytes = read_file(path);
    std::vector<T> v(bytes.size() / sizeof(T));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
    return v;
}

// The launch every fiber runs (the kernel's arguments).
static struct {
    const Dims *dims;
    const unsigned *layers, *i;
    const uint2 *e;
    const float *w;
    float *s;
    const SlotWork *slots;
    const unsigned *inputs;
    unsigned *outputs, *ctl;
} args;

static void kernel_body() {
    chip_passes(args.dims, reinterpret_cast<const Layer *>(args.layers), args.i, args.e, args.w, args.s, args.slots,
                args.inputs, args.outputs, args.ctl);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        std::fprintf(stderr, "usage: run_kernel CHIP RUN [SCHEDULE]\n");
        return 2;
    }
    if (argc == 4) emu::set_schedule(std::stoull(argv[3]));
    std::string dir = argv[1], run = argv[2];
    auto dims = read_array<Dims>(dir + "/dims");
    auto layers = read_array<unsigned>(dir + "/layers");
    auto i = read_array<unsigned>(dir + "/i");
    auto e = read_array<uint2>(dir + "/e");
    auto w = read_array<float>(dir + "/w");
    auto s = read_array<float>(run + "/s");
    auto shared_text = read_file(dir + "/shared");
    unsigned long shared = std::stoul(std::string(shared_text.begin(), shared_text.end()));
    // (16 more bytes: the kernel reads float4s from its start.)
    emu::dynamic_shared_bytes.assign(shared + 16, 0);
    std::vector<unsigned> ctl(4, 0);
    std::ifstream launches(run + "/launches");
    std::string line;
    while (std::getline(launches, line)) {
        std::istringstream words(line);
        SlotWork work = {};
        words >> work.n_inputs >> work.max_passes >> work.stop_mask;
        std::vector<unsigned> inputs(work.n_inputs);
        for (unsigned &t : inputs) words >> t;
        std::vector<unsigned> outputs(work.max_passes, 0);
        args = {dims.data(), layers.data(), i.data(), e.data(), w.data(), s.data(), &work, inputs.data(),
                outputs.data(), ctl.data()};
        emu::run_block(THREADS, kernel_body);
        std::printf("%u %u", ctl[0], ctl[3]);
        for (unsigned p = 0; p < ctl[0]; p++) std::printf(" %u", outputs[p]);
        std::printf("\n");
        if (ctl[3] != 0) break;
    }
    return 0;
}
