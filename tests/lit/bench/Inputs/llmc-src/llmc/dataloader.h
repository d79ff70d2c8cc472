// Stand-in for llm.c's llmc/dataloader.h (see ../train_gpt2.c): the token file header.
#define HEADER_SIZE 256
if (header[0] != 20240520) fail();
if (header[1] != 1) fail();
