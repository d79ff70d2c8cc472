// A stand-in for llm.c's train_gpt2.c in tests/lit/bench/llmc-prepare.test: only the facts
// bench/llmc_prepare.py reads from the real file, one per line, in that file's syntax; it is
// not llm.c's code and does not compile. B and T differ from llm.c's (4, 64), to show they are
// read from here.
float eps = 1e-5f;
out = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
param_sizes[0] = Vp * C; // wte
param_sizes[1] = maxT * C; // wpe
param_sizes[2] = L * C; // ln1w
param_sizes[3] = L * C; // ln1b
param_sizes[4] = L * (3 * C) * C; // qkvw
param_sizes[5] = L * (3 * C); // qkvb
param_sizes[6] = L * C * C; // attprojw
param_sizes[7] = L * C; // attprojb
param_sizes[8] = L * C; // ln2w
param_sizes[9] = L * C; // ln2b
param_sizes[10] = L * (4 * C) * C; // fcw
param_sizes[11] = L * (4 * C); // fcb
param_sizes[12] = L * C * (4 * C); // fcprojw
param_sizes[13] = L * C; // fcprojb
param_sizes[14] = C; // lnfw
param_sizes[15] = C; // lnfb
int model_header[256];
if (model_header[0] != 20240326) fail();
if (model_header[1] != 3) fail();
matmul_forward(acts.logits, acts.lnf, params.wte, NULL, B, T, C, Vp);
gpt2_build_from_checkpoint(&model, "model.bin");
const char* tiny_shakespeare_train = "data/train.bin";
const char* tiny_shakespeare_val = "data/val.bin";
int B = 2;
int T = 8;
int val_num_batches = 3;
tokenizer_init(&tokenizer, "tokenizer.bin");
for (int step = 0; step <= 40; step++)
if (step % 10 == 0) validate();
if (step > 0 && step % 20 == 0) sample();
