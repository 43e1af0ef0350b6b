// llama-cpu-probe: what a ggml build does on this CPU, without a model. It prints the CPU features the build was
// compiled with (llama.cpp's system_info line, printed the same way) and runs one matrix product through ggml's
// vector kernels, checked against plain C; it exits 1 if the product is wrong. The llama_build role links it with
// every build's ggml and runs it on every host before installing the build, so a build of the worker's program
// alone is checked as fully as one with llama-server. The Arm proof (tests/integration/test_arm_cross.py) runs it
// under qemu with each Graviton's flags.
#include <math.h>
#include <stdio.h>

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

enum { ROWS = 64, COLS = 256 };

int main(void) {
    ggml_backend_reg_t cpu = ggml_backend_cpu_reg();
    ggml_backend_get_features_t get_features =
        (ggml_backend_get_features_t) ggml_backend_reg_get_proc_address(cpu, "ggml_backend_get_features");
    printf("system_info: %s : ", ggml_backend_reg_name(cpu));
    for (struct ggml_backend_feature * feature = get_features(cpu); feature->name; feature++) {
        printf("%s = %s | ", feature->name, feature->value);
    }
    printf("\n");
    fflush(stdout);  // the line is read even if the kernels below die

    struct ggml_init_params params = { .mem_size = 16 * 1024 * 1024, .mem_buffer = NULL, .no_alloc = false };
    struct ggml_context * ctx = ggml_init(params);
    struct ggml_tensor * a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, COLS, ROWS);
    struct ggml_tensor * b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, COLS, ROWS);
    float * av = (float *) a->data, * bv = (float *) b->data;
    for (int i = 0; i < ROWS * COLS; i++) {
        av[i] = (float) ((i * 7) % 13) / 13.0f - 0.5f;
        bv[i] = (float) ((i * 5) % 11) / 11.0f - 0.5f;
    }
    struct ggml_tensor * product = ggml_mul_mat(ctx, a, b);  // product[j][i] = dot(a row i, b row j)
    struct ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, product);
    ggml_graph_compute_with_ctx(ctx, graph, 2);

    double worst = 0;
    for (int j = 0; j < ROWS; j++) {
        for (int i = 0; i < ROWS; i++) {
            double expected = 0;
            for (int k = 0; k < COLS; k++) {
                expected += (double) av[i * COLS + k] * bv[j * COLS + k];
            }
            double error = fabs(((float *) product->data)[j * ROWS + i] - expected);
            worst = error > worst ? error : worst;
        }
    }
    printf("matmul %dx%d: largest error %.2e\n", ROWS, COLS, worst);
    ggml_free(ctx);
    return worst < 1e-3 ? 0 : 1;
}
