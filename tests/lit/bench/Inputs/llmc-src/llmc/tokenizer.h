// Stand-in for llm.c's llmc/tokenizer.h (see ../train_gpt2.c): the tokenizer header.
assert(header[0] == 20240328);
if (version == 2) read_eot();
